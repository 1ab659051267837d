#include "doctor/run/group.hpp"

#include <algorithm>

#include "base/child_process.hpp"

namespace ddp::doctor {
namespace {

std::string waiting_for(int rank, const std::string& step) {
  return "waiting for rank " + std::to_string(rank) + " at step '" + step + "'";
}

std::vector<CheckResult> rank0_meeting(const Launch& launch, const std::vector<int>& members,
                                       std::chrono::milliseconds timeout) {
  const CheckInfo& check = checks::kMasterPort;
  const std::string where = host_port(launch.master_addr, launch.master_port);
  const std::string threshold = "joined within " + seconds_text(timeout);
  std::vector<CheckResult> results{
      make_result(check, Status::Ok, "listening on " + std::to_string(launch.master_port), threshold,
                  std::to_string(members.size()) + " of " + std::to_string(launch.world_size) + " ranks joined")};
  for (int rank = 1; rank < launch.world_size; ++rank) {
    if (std::binary_search(members.begin(), members.end(), rank)) continue;
    CheckResult missing = make_result(
        check, Status::Fail, "never connected", threshold,
        "rank " + std::to_string(rank) + " did not reach rank 0 at " + where +
            ": its own output says why (its node "
            "cannot reach MASTER_ADDR:MASTER_PORT, a firewall or security group drops it, or it did not start)");
    missing.rank = rank;
    missing.host = "?";
    results.push_back(std::move(missing));
  }
  return results;
}

}  // namespace

Group::Group(std::unique_ptr<StoreServer> server, std::unique_ptr<StoreClient> store, int rank,
             std::vector<int> members, std::string description)
    : server_(std::move(server)),
      store_(std::move(store)),
      rank_(rank),
      members_(std::move(members)),
      description_(std::move(description)) {}

int Group::index() const {
  return static_cast<int>(std::find(members_.begin(), members_.end(), rank_) - members_.begin());
}

std::vector<std::string> Group::gather(const std::string& step, const std::string& mine, Deadline deadline) {
  if (!store_) return {mine};
  const std::string key = unique_key(step);
  if (rank_ != 0) {
    store_->set(key + "/" + std::to_string(rank_), mine, deadline);
    return {};
  }
  std::vector<std::string> all;
  for (const int member : members_) {
    all.push_back(member == 0 ? mine
                              : store_->get(key + "/" + std::to_string(member), waiting_for(member, step), deadline));
  }
  return all;
}

std::string Group::broadcast(const std::string& step, const std::string& from_root, Deadline deadline) {
  if (!store_) return from_root;
  const std::string key = unique_key(step);
  if (rank_ == 0) {
    store_->set(key, from_root, deadline);
    return from_root;
  }
  return store_->get(key, waiting_for(0, step), deadline);
}

std::vector<std::string> Group::all_gather(const std::string& step, const std::string& mine, Deadline deadline) {
  WireWriter packed;
  for (const auto& message : gather(step, mine, deadline)) packed.put(message);
  WireReader reader(broadcast(step, packed.bytes(), deadline));
  std::vector<std::string> all;
  for (size_t i = 0; i < members_.size(); ++i) all.push_back(reader.get());
  if (!reader.done()) throw ExchangeError("step '" + step + "': rank 0 sent more messages than there are members");
  return all;
}

void Group::barrier(const std::string& step, Deadline deadline) {
  gather(step, "", deadline);
  broadcast(step, "", deadline);
}

void Group::finish(Deadline deadline) {
  store_.reset();
  if (server_) server_->wait_for_ranks_to_leave(deadline);
}

Meeting meet(Launch launch, const TimeBudget& budget, const MasterSharer& share) {
  const auto timeout = budget.exchange;
  Meeting meeting;
  meeting.launch = launch;
  if (launch.source == LaunchSource::SingleProcess) {
    meeting.group = std::make_unique<Group>();
    return meeting;
  }
  const bool shared = launch.source == LaunchSource::OpenMpi && (launch.master_addr.empty() || launch.master_port == 0);
  if (shared && !share) {
    throw ExchangeError(
        "started by mpirun without MASTER_ADDR and MASTER_PORT, and this ddp-doctor was built without "
        "MPI to share them: export both (mpirun -x MASTER_ADDR=... -x MASTER_PORT=...)");
  }
  const Deadline joined_by = Deadline::after(timeout);
  const Deadline members_by = Deadline::after(budget.meet);
  std::unique_ptr<StoreServer> server;
  if (launch.rank == 0) {
    try {
      server = std::make_unique<StoreServer>(shared ? 0 : launch.master_port, launch.run_id, launch.world_size,
                                             launch.job_key);
    } catch (const NetError& e) {
      throw ExchangeError(std::string(e.what()) + "; another program holds MASTER_PORT on rank 0's node: choose " +
                          "another port (srun --ddp-port=N, or MASTER_PORT)");
    }
    launch.master_port = server->port();
  }
  if (shared) share(launch);
  const std::string description =
      launch.source == LaunchSource::OpenMpi ? "mpi" : "tcp " + host_port(launch.master_addr, launch.master_port);
  const Greeting greeting{launch.run_id, launch.world_size, launch.rank, launch.job_key};
  auto store = std::make_unique<StoreClient>(launch.rank == 0 ? "127.0.0.1" : launch.master_addr, launch.master_port,
                                             greeting, timeout);
  std::vector<int> members;
  if (launch.rank == 0) {
    members = server->wait_for_ranks(joined_by);
    store->set("members", encode_members(members), Deadline::after(timeout));
    meeting.results = rank0_meeting(launch, members, timeout);
  } else {
    // Rank 0 publishes the list once every rank came or its own wait ended, up to `timeout` after it started.
    members =
        decode_members(store->get("members", waiting_for(0, "members"), members_by), launch.world_size, launch.rank);
    meeting.results = {make_result(checks::kMasterPort, Status::Ok,
                                   "reached " + host_port(launch.master_addr, launch.master_port),
                                   "joined within " + seconds_text(timeout))};
  }
  if (shared) {
    meeting.results = {};
    if (launch.rank == 0) {
      meeting.results.push_back(skipped(checks::kMasterPort,
                                        "no MASTER_ADDR/MASTER_PORT to probe: export them or pass "
                                        "--master-addr/--master-port"));
    }
  }
  meeting.group =
      std::make_unique<Group>(std::move(server), std::move(store), launch.rank, std::move(members), description);
  meeting.launch = launch;
  return meeting;
}

std::vector<Peer> exchange_peers(Group& group, const Peer& mine, Deadline deadline) {
  std::vector<Peer> peers;
  for (auto& theirs : group.all_gather("peers", encode_peer(mine), deadline))
    peers.push_back(decode_peer(std::move(theirs)));
  return peers;
}

std::vector<Peer> leaders(const std::vector<Peer>& peers) {
  std::vector<Peer> found;
  std::copy_if(peers.begin(), peers.end(), std::back_inserter(found), [](const Peer& peer) { return peer.leader; });
  return found;
}

std::string describe(const Peer& peer) { return "rank " + std::to_string(peer.rank) + " (" + peer.host + ")"; }

}  // namespace ddp::doctor
