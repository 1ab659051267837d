#include "ddp_runtime/distributed/recovery.hpp"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <future>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "base/socket.hpp"
#include "core/netif.hpp"
#include "ddp_runtime/common/error_message.hpp"
#include "ddp_runtime/distributed/project_store.hpp"
#include "ddp_runtime/distributed/recovery_records.hpp"
#include "ddp_runtime/distributed/store_auth.hpp"
#include "store/store.hpp"

namespace ddp::runtime {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr milliseconds kRecoveryPoll{10};
// A live member's standby store answers a probe's greeting within this; a stopped member's (its port still accepts)
// is probed again until the join window has passed, and the leader decides once the last probe is back.
constexpr milliseconds kGreetingAnswer{500};
// At rank 0's standby store: the counter of tickets a replacement takes, then its request under its ticket.
constexpr char kJoinTickets[] = "joins";
std::string join_request_key(int64_t ticket) { return "join/" + std::to_string(ticket); }

std::atomic<int> releasing{0};

// Every key of every generation lies under a prefix that only the job's key gives.
std::string key_prefix(const Launch& launch, const std::string& run_id) {
  return job_hmac(launch, "ddp-train recovery keys " + run_id) + "/recovery/";
}

// "address port", as the endpoints travel in the identities (IPv6 addresses hold colons).
std::pair<std::string, uint16_t> split_endpoint(const std::string& endpoint) {
  const std::size_t space = endpoint.rfind(' ');
  if (space == std::string::npos) return {endpoint, 0};
  return {endpoint.substr(0, space), static_cast<uint16_t>(std::stoi(endpoint.substr(space + 1)))};
}

bool refused(std::string reason) {
  std::transform(reason.begin(), reason.end(), reason.begin(), [](unsigned char c) { return std::tolower(c); });
  return reason.find("refused") != std::string::npos;
}

bool wait_for_key(const compat::StorePtr& store, const std::string& key, milliseconds timeout) {
  try {
    store->wait({key}, timeout);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace

struct Recovery::Probe {
  enum State { Dead, Silent, Answered } state = Silent;
  compat::StorePtr store;  // Answered: verified, under the job's prefix
};

std::string group_file_name(const std::string& run_id) { return ".ddp-group-" + run_id; }

std::string describe_lost(const std::vector<Lost>& lost) {
  std::string names;
  for (std::size_t i = 0; i < lost.size(); ++i) {
    names += i == 0 ? "" : i + 1 == lost.size() ? " and " : ", ";
    names += describe_rank({lost[i].identity}, 0);
  }
  return names;
}

Recovery::Recovery(const Launch& launch, Distributed& dist, RecoverySettings settings)
    : launch_(launch), dist_(dist), settings_(std::move(settings)), self_(dist.rank) {
  host_standby();
  identities_ = gather_identities(dist_, endpoint_);
  for (std::size_t rank = 0; rank < identities_.size(); ++rank) {
    members_.push_back({static_cast<int>(rank), identities_[rank]});
  }
  next_id_ = static_cast<int>(members_.size());
}

Recovery::Recovery(const Launch& launch, Distributed& dist, RecoverySettings settings, ReplacementTag)
    : launch_(launch), dist_(dist), settings_(std::move(settings)), self_(-1) {
  host_standby();
}

std::unique_ptr<Recovery> Recovery::replacement(const Launch& launch, Distributed& dist, RecoverySettings settings) {
  return std::unique_ptr<Recovery>(new Recovery(launch, dist, std::move(settings), ReplacementTag{}));
}

void Recovery::host_standby() {
  const std::string address = advertised_address(launch_.socket_ifnames);
  uint16_t port = 0;
  compat::StorePtr own;
  try {
    // Every address, as c10d's TCPStore bound: `address` may be a host name (no GLOO_SOCKET_IFNAME) that this node
    // resolves only through the others' view of it; the endpoint names it.
    own = host_project_store(launch_, standby_run(settings_.run_id), "", 0, settings_.timeout, port, kMaxClients);
  } catch (const std::exception& e) {
    throw std::runtime_error("rank " + std::to_string(launch_.rank) + " could not host its standby store on " +
                             address + " for --recover in-place: " + error_summary(e));
  }
  endpoint_ = address + " " + std::to_string(port);
  standby_ = c10::make_intrusive<c10d::PrefixStore>(key_prefix(launch_, settings_.run_id), own);
}

Recovery::~Recovery() = default;

std::string Recovery::seal(const std::string& name, const std::string& text) const {
  return seal_record(launch_, settings_.run_id, name, text);
}

std::optional<std::string> Recovery::open_sealed(const std::string& name, const std::vector<uint8_t>& value,
                                                 const std::string& from) {
  std::optional<std::string> opened = open_record(launch_, settings_.run_id, name, store_text(value));
  if (!opened) {
    refused_.push_back("refused the record " + name + " " + from +
                       ": its MAC under the job's key does not verify (forged, or replayed from another generation "
                       "or attempt)");
  }
  return opened;
}

std::string Recovery::key(int64_t generation, const std::string& name) const {
  return "g" + std::to_string(generation) + "/" + name;
}

void Recovery::release_group(Distributed& dist) {
  compat::ProcessGroupPtr group = std::move(dist.group);
  dist.group = compat::ProcessGroupPtr();
  compat::StorePtr store = std::move(dist.store);
  dist.store = compat::StorePtr();
  if (!group) return;
  ++releasing;
  std::thread([group = std::move(group), store = std::move(store)]() mutable {
    try {
      group.reset();
      store.reset();
    } catch (...) {
      // A group that fails to go has nothing more to say: its ranks are already on their way to a new one.
    }
    --releasing;
  }).detach();
}

int Recovery::groups_being_released() { return releasing.load(); }

Recovery::Probe Recovery::probe(const Member& member, milliseconds wait) const {
  const auto [host, port] = split_endpoint(member.identity.standby);
  try {
    Socket::connect_to(host, port, Deadline::after(wait));
  } catch (const NetError& e) {
    return {refused(e.what()) ? Probe::Dead : Probe::Silent, {}};
  }
  try {
    // The server proves the job's key with a fresh nonce: one that took a freed port cannot pass for the member.
    const compat::StorePtr store = connect_project_store(launch_, standby_run(settings_.run_id), host, port,
                                                         std::min(wait, kGreetingAnswer), settings_.timeout);
    return {Probe::Answered, c10::make_intrusive<c10d::PrefixStore>(key_prefix(launch_, settings_.run_id), store)};
  } catch (const std::exception&) {
    return {Probe::Silent, {}};
  }
}

Regrouped Recovery::regroup(const MemberReport& mine) {
  const auto start = Clock::now();
  const int64_t generation = generation_ + 1;
  check_not_passed_by(generation);
  const std::vector<Member> candidates = members_;
  for (const Member& candidate : candidates) {
    Regrouped result;
    if (candidate.id == self_) {
      result = lead(generation, mine);
    } else {
      // A silent candidate is probed again until the join window has passed: a loaded node may answer late, and
      // skipping a live candidate would make two leaders (the quorum keeps them from both going on, but then
      // neither does).
      Probe found = probe(candidate, settings_.probe);
      while (found.state == Probe::Silent && Clock::now() < start + settings_.join_window) {
        found = probe(candidate, settings_.probe);
      }
      if (found.state != Probe::Answered) continue;
      // It lives: it leads once its own collective has failed, within --timeout.
      const std::string leader = key(generation, "leader");
      if (!wait_for_key(found.store, leader, settings_.timeout + settings_.join_window)) continue;
      const auto said = open_sealed(leader, found.store->get(leader), "from " + describe_rank({candidate.identity}, 0));
      if (said != std::to_string(candidate.id)) continue;
      try {
        result = follow(generation, found.store, mine);
      } catch (const LeftOut&) {
        throw;
      } catch (const GroupNotFormed&) {
        throw;  // the leader did its part: the generation stands, and the next one is met from it
      } catch (const std::exception&) {
        continue;  // the leader failed while the others waited: the next member that answers leads
      }
    }
    result.seconds = Clock::now() - start;
    result.refused = std::move(refused_);
    refused_.clear();
    return result;
  }
  throw std::runtime_error("no member of generation " + std::to_string(generation_) + " could be reached");
}

void Recovery::check_not_passed_by(int64_t generation) const {
  if (settings_.group_file.empty()) return;
  RankIdentity mine;
  for (const Member& member : members_) {
    if (member.id == self_) mine = member.identity;
  }
  const std::string me = describe_rank({mine}, 0);
  const GroupFile file = read_group_file(launch_, settings_.run_id, settings_.group_file);
  if (file.ended) {
    throw LeftOut(me + " was left out: the other ranks went on without it and ended the run (" + settings_.group_file +
                  " says so)");
  }
  if (file.generation >= generation) {
    throw LeftOut(me + " was left out: the other ranks went on without it as generation " +
                  std::to_string(file.generation) + " (" + settings_.group_file + " names it)");
  }
}

Regrouped Recovery::lead(int64_t generation, const MemberReport& mine) {
  const std::string my_report = key(generation, "report/" + std::to_string(self_));
  standby_->set(my_report, store_value(seal(my_report, report_text(mine))));
  standby_->set(key(generation, "leader"), store_value(seal(key(generation, "leader"), std::to_string(self_))));
  // Each other member is probed at once, on a thread of its own. One that is silent is probed again until the join
  // window has passed (a loaded node may answer late); one that answers is awaited until it reports; a dead one
  // is not.
  const auto start = Clock::now();
  const auto window_end = start + settings_.join_window;
  const auto deadline = start + settings_.timeout + settings_.join_window;
  const auto probe_later = [this](const Member& member) {
    return std::async(std::launch::async, [this, member] { return probe(member, settings_.probe).state; });
  };
  std::map<int, std::future<Probe::State>> probes;
  for (const Member& member : members_) {
    if (member.id != self_) probes[member.id] = probe_later(member);
  }
  std::map<int, MemberReport> reported{{self_, mine}};
  std::set<int> forged;  // reports that did not verify: those members did not report
  std::map<int, Probe::State> found;
  for (;;) {
    bool waiting = false;
    for (const Member& member : members_) {
      if (reported.count(member.id) || forged.count(member.id)) continue;
      const std::string report = key(generation, "report/" + std::to_string(member.id));
      if (standby_->check({report})) {
        const auto opened = open_sealed(report, standby_->get(report), "at this rank's standby store");
        if (opened) {
          reported[member.id] = parse_report(*opened);
        } else {
          forged.insert(member.id);
        }
        continue;
      }
      auto& pending = probes[member.id];
      if (pending.valid() && pending.wait_for(milliseconds(0)) == std::future_status::ready) {
        found[member.id] = pending.get();
        if (found[member.id] == Probe::Silent && Clock::now() < window_end) pending = probe_later(member);
      }
      const bool settled = found.count(member.id) &&
                           (found[member.id] == Probe::Dead || (found[member.id] == Probe::Silent && !pending.valid()));
      if (!settled) waiting = true;
    }
    if (!waiting || Clock::now() >= deadline) break;
    std::this_thread::sleep_for(kRecoveryPoll);
  }

  GenerationList list;
  int dead = 0;
  for (const Member& member : members_) {
    if (reported.count(member.id)) continue;
    const bool is_dead = found.count(member.id) && found[member.id] == Probe::Dead;
    dead += is_dead;
    list.lost.emplace_back(member.id, is_dead);
  }
  // The source: the most steps among members holding a state, the lowest rank among equals.
  int source = -1;
  for (const Member& member : members_) {
    const auto it = reported.find(member.id);
    if (it == reported.end() || !it->second.has_state) continue;
    if (source < 0 || it->second.step > reported[source].step) source = member.id;
  }
  const auto count = static_cast<int>(reported.size());
  const int voters = static_cast<int>(members_.size()) - dead;
  const std::string answered = std::to_string(count) + " of " + std::to_string(members_.size()) + " ranks answer";
  if (count < settings_.min_ranks) {
    list.verdict = answered + ", fewer than --min-ranks " + std::to_string(settings_.min_ranks);
  } else if (2 * count <= voters) {
    list.verdict = answered + ", no majority of the " + std::to_string(voters) +
                   " that may live on (a rank that is stopped, hung or cut off may still go on with others)";
  } else if (source < 0) {
    list.verdict = "no rank that answers holds a trained state";
  }
  list.formed = list.verdict.empty();
  list.next_id = next_id_;
  std::map<int, RankIdentity> known;
  for (const Member& member : members_) known[member.id] = member.identity;
  if (source >= 0) list.members.push_back({source, reported[source].step, true, known[source]});
  for (const Member& member : members_) {
    const auto it = reported.find(member.id);
    if (it != reported.end() && member.id != source) {
      list.members.push_back({member.id, it->second.step, it->second.has_state, member.identity});
    }
  }
  if (list.formed) admit_replacements(generation, list);
  const std::string encoded = list.encode();
  standby_->set(key(generation, "list"), store_value(seal(key(generation, "list"), encoded)));
  return take_list(generation, encoded, standby_);
}

Regrouped Recovery::follow(int64_t generation, const compat::StorePtr& store, const MemberReport& mine) {
  const std::string my_report = key(generation, "report/" + std::to_string(self_));
  store->set(my_report, store_value(seal(my_report, report_text(mine))));
  const std::string list_key = key(generation, "list");
  if (!wait_for_key(store, list_key, settings_.timeout + 2 * settings_.join_window)) {
    throw std::runtime_error("the leader of generation " + std::to_string(generation) + " closed no list");
  }
  const auto list = open_sealed(list_key, store->get(list_key), "from the leader's store");
  if (!list) throw std::runtime_error(refused_.back());
  return take_list(generation, *list, store);
}

Regrouped Recovery::take_list(int64_t generation, const std::string& encoded, const compat::StorePtr& store) {
  const GenerationList list = GenerationList::decode(encoded);
  std::map<int, RankIdentity> known;
  for (const Member& member : members_) known[member.id] = member.identity;
  for (const auto& e : list.members) known[e.id] = e.identity;
  Regrouped result;
  result.generation = generation;
  result.formed = list.formed;
  result.verdict = list.verdict;
  for (const auto& [id, dead] : list.lost) result.lost.push_back({id, known[id], dead});
  const auto me = std::find_if(list.members.begin(), list.members.end(), [&](const auto& e) { return e.id == self_; });
  if (me == list.members.end()) {
    throw LeftOut(describe_rank({known[self_]}, 0) +
                  " was left out: the other ranks went on without it as generation " + std::to_string(generation) +
                  " (it did not answer within " + std::to_string(settings_.probe.count()) +
                  " ms when they met, or came too late)");
  }
  if (!list.members.empty()) {
    result.source_is_me = list.members.front().id == self_;
    result.source_step = list.members.front().step;
    for (const auto& e : list.members) {
      if (e.step != result.source_step || !e.has_state) result.someone_behind = true;
      if (!e.has_state) result.joined.push_back(e.identity);
    }
  }
  if (!list.formed) return result;

  // The generation is this one from here on, also when its group fails to form: the next attempt is a newer one.
  members_.clear();
  identities_.clear();
  for (const auto& e : list.members) {
    members_.push_back({e.id, known[e.id]});
    identities_.push_back(known[e.id]);
  }
  generation_ = generation;
  next_id_ = list.next_id;
  const auto rank = static_cast<int>(me - list.members.begin());
  const auto size = static_cast<int>(members_.size());
  auto gloo_store = c10::make_intrusive<c10d::PrefixStore>(key(generation, "gloo/"), store);
  try {
    dist_.group = compat::make_gloo_group(gloo_store, rank, size, launch_.socket_ifnames, settings_.timeout);
    dist_.store = store;
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const std::exception& e) {
    throw GroupNotFormed("the group of generation " + std::to_string(generation) +
                         " did not form: " + error_summary(e));
  }
  dist_.rank = rank;
  dist_.world_size = size;
  return result;
}

// Rank 0 takes every replacement whose request is written at its store into the generation it forms (a ticket whose
// request is not written yet holds up no other: join_tickets.hpp): each gets the next free member id, no state
// (rank 0 sends it the state), and learns the generation it belongs to.
void Recovery::admit_replacements(int64_t generation, GenerationList& list) {
  for (const int64_t ticket :
       join_tickets_.take(standby_->add(kJoinTickets, 0), join_request_written(), Clock::now())) {
    const std::string request = join_request_key(ticket);
    const auto asked = open_sealed(request, standby_->get(request), "at this rank's standby store");
    if (!asked) continue;  // not admitted
    std::vector<std::string> fields;
    std::istringstream row(*asked);
    for (std::string field; std::getline(row, field, '\t');) fields.push_back(field);
    fields.resize(3);
    const int id = list.next_id++;
    list.members.push_back({id, 0, false, RankIdentity{fields[0], fields[1], fields[2], id}});
    const std::string admitted = request + "/generation";
    standby_->set(admitted, store_value(seal(admitted, std::to_string(generation))));
  }
}

bool Recovery::joins_pending() {
  return join_tickets_.pending(standby_->add(kJoinTickets, 0), join_request_written(), Clock::now());
}

JoinTickets::Written Recovery::join_request_written() const {
  return [this](int64_t ticket) { return standby_->check({join_request_key(ticket)}); };
}

std::string Recovery::group_file() const {
  GroupFile file;
  file.generation = generation_;
  for (const Member& member : members_) file.members.emplace_back(member.id, member.identity.standby);
  return seal(kGroupFileRecord, file.encode());
}

std::string Recovery::state_mac(const char* bytes, std::size_t size) const {
  return runtime::state_mac(launch_, settings_.run_id, generation_, bytes, size);
}

std::string Recovery::ended_group_file() const {
  GroupFile file;
  file.ended = true;
  return seal(kGroupFileRecord, file.encode());
}

Regrouped Recovery::join(const std::string& group_file_path, const std::function<void(const std::string&)>& asked) {
  const auto start = Clock::now();
  const auto deadline = start + 2 * settings_.timeout;
  std::string why = "no group file " + group_file_path + " (is the run going, with the same --snapshot-dir?)";
  while (Clock::now() < deadline) {
    const GroupFile file = read_group_file(launch_, settings_.run_id, group_file_path);
    if (file.ended) {
      throw std::runtime_error("this replacement could not join the run: it has ended (" + group_file_path +
                               " says so)");
    }
    if (file.unsealed) {
      why = group_file_path +
            " is not sealed with this job's key (another job wrote it, or it was changed): it was not used";
    }
    const auto& members = file.members;
    if (!members.empty()) {
      // The current rank 0 admits replacements; a rank 0 that does not answer is being replaced itself, and the
      // group file names the next one once the others have regrouped.
      const Member leader{members.front().first, RankIdentity{"", "", members.front().second, members.front().first}};
      const Probe found = probe(leader, settings_.probe);
      why = "rank " + std::to_string(leader.id) + " named by " + group_file_path + " did not answer at " +
            leader.identity.standby +
            (found.state == Probe::Dead ? " (nothing listens there)" : " (no proof within the probe's wait)") + " in " +
            std::to_string(std::chrono::duration_cast<milliseconds>(Clock::now() - start).count()) + " ms";
      if (found.state == Probe::Answered) {
        const int64_t ticket = found.store->add(kJoinTickets, 1);
        const std::string request = join_request_key(ticket);
        found.store->set(request,
                         store_value(seal(request, host_name() + "\t" + dist_.device.str() + "\t" + endpoint_)));
        asked("asked rank " + std::to_string(leader.id) + " to join the run (request " + std::to_string(ticket) + ")");
        why = "rank " + std::to_string(leader.id) + " did not admit this replacement within the timeout";
        const std::string admitted = request + "/generation";
        const std::string from = "from rank " + std::to_string(leader.id) + "'s store";
        if (wait_for_key(found.store, admitted, settings_.timeout)) {
          const auto generation_text = open_sealed(admitted, found.store->get(admitted), from);
          const int64_t generation = generation_text ? std::stoll(*generation_text) : -1;
          const std::string list_key = key(generation, "list");
          if (generation_text && wait_for_key(found.store, list_key, settings_.timeout)) {
            const auto encoded = open_sealed(list_key, found.store->get(list_key), from);
            if (encoded) {
              for (const auto& e : GenerationList::decode(*encoded).members) {
                if (e.identity.standby == endpoint_) self_ = e.id;
              }
              Regrouped result = take_list(generation, *encoded, found.store);
              result.seconds = Clock::now() - start;
              result.refused = std::move(refused_);
              refused_.clear();
              return result;
            }
          }
          if (!refused_.empty()) why = refused_.back();
        }
      }
    }
    std::this_thread::sleep_for(milliseconds(200));
  }
  throw std::runtime_error("this replacement could not join the run: " + why);
}

}  // namespace ddp::runtime
