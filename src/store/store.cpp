#include "store/store.hpp"

#include <sys/socket.h>
#include <time.h>

#include <algorithm>
#include <climits>
#include <optional>
#include <system_error>
#include <thread>

#include "base/child_process.hpp"
#include "base/hmac.hpp"
#include "base/parse.hpp"
#include "core/job_key.hpp"

namespace ddp {
namespace {

constexpr const char* kHello = "ddp-doctor/3";
constexpr size_t kMaxGreeting = 4096;
constexpr auto kIdle = std::chrono::hours(24);  // between a rank's requests: until it or the server ends
constexpr auto kConnectRetryPause = std::chrono::milliseconds(100);
constexpr auto kLateReply = std::chrono::seconds(1);  // a get's "timeout" may come this much after its deadline

// 128 random bits, as a job's key is made.
std::string greeting_nonce() { return new_job_key(); }

// A server that cannot prove the job's key: `how` it failed.
std::string unproven(const std::string& where, const std::string& how) {
  return "what answers at " + where + " cannot prove that it knows this job's key (DDP_JOB_KEY): " + how +
         "; it is not this job's rank 0, another program holds the port; choose another port (srun --ddp-port=N, or "
         "MASTER_PORT)";
}

}  // namespace

std::string greeting_proof(const std::string& job_key, const std::string& side,
                           const std::vector<std::string>& fields) {
  WireWriter message;
  message.put(kHello).put(side);
  for (const std::string& field : fields) message.put(field);
  return hmac_sha256_hex(job_key, message.bytes());
}

int64_t wall_clock_ns() {
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  return static_cast<int64_t>(now.tv_sec) * 1000000000 + now.tv_nsec;
}

struct StoreServer::Client {
  size_t keys_made = 0;
};

StoreServer::StoreServer(uint16_t port, std::string run_id, int world_size, std::string job_key)
    : StoreServer("", port, Admission{std::move(run_id), world_size, std::move(job_key), true}) {}

StoreServer::StoreServer(const std::string& host, uint16_t port, Admission admission)
    : listener_(Socket::listen_on(host, port)),
      port_(listener_.local_port()),
      admission_(std::move(admission)),
      threads_(1) {
  std::thread([this] { accept_connections(); }).detach();
}

StoreServer::~StoreServer() {
  std::unique_lock<std::mutex> lock(mutex_);
  stopping_ = true;
  for (const int fd : connections_) shutdown(fd, SHUT_RDWR);
  changed_.notify_all();
  changed_.wait(lock, [this] { return threads_ == 0; });
}

std::vector<int> StoreServer::wait_for_ranks(Deadline deadline) {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait_for(lock, std::chrono::milliseconds(deadline.poll_ms()),
                    [this] { return static_cast<int>(joined_.size()) == admission_.world_size; });
  return {joined_.begin(), joined_.end()};
}

void StoreServer::wait_for_ranks_to_leave(Deadline deadline) {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait_for(lock, std::chrono::milliseconds(deadline.poll_ms()), [this] { return connected_ranks_ == 0; });
}

size_t StoreServer::stored_bytes() {
  std::lock_guard<std::mutex> lock(mutex_);
  return stored_bytes_;
}

void StoreServer::accept_connections() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    lock.unlock();
    Socket socket;
    try {
      socket = listener_.accept(Deadline::after(std::chrono::milliseconds(50)));
    } catch (const NetError&) {
    }
    lock.lock();
    if (!socket.valid()) continue;
    if (pending_.size() >= kMaxPending) {
      // The oldest stranger makes room: silent connections never keep a rank out.
      const auto oldest = std::min_element(pending_.begin(), pending_.end(),
                                           [](const auto& a, const auto& b) { return a.second < b.second; });
      shutdown(oldest->first, SHUT_RDWR);
      pending_.erase(oldest);
    }
    const int fd = socket.fd();
    connections_.insert(fd);
    pending_.emplace(fd, arrivals_++);
    ++threads_;
    try {
      std::thread([this, s = std::move(socket)]() mutable { serve(std::move(s)); }).detach();
    } catch (const std::system_error&) {
      // No thread to be had (the process's thread or memory limit): this connection is closed, its client fails or
      // tries again, and the store goes on serving the others.
      connections_.erase(fd);
      pending_.erase(fd);
      --threads_;
    }
  }
  --threads_;
  changed_.notify_all();
}

void StoreServer::serve(Socket socket) {
  int rank = kAnyRank;
  bool admitted = false;
  try {
    admitted = admit(socket, rank);
    Client client;
    while (admitted) {
      WireReader request(socket.recv_frame(Deadline::after(kIdle), kMaxFrame));
      socket.send_frame(answer(request, client), Deadline::after(kIdle));
    }
  } catch (const std::exception&) {
    // closed, silent past its greeting time, over a limit, or not our protocol: the connection ends
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (admitted) --clients_;
  if (admitted && admission_.rank_slots && rank > 0) --connected_ranks_;
  connections_.erase(socket.fd());
  pending_.erase(socket.fd());
  --threads_;
  changed_.notify_all();
}

bool StoreServer::admit(const Socket& socket, int& rank) {
  WireReader hello(socket.recv_frame(Deadline::after(kGreetingWait), kMaxGreeting));
  if (hello.get() != kHello) return false;
  const std::string run_id = hello.get_text();
  const int64_t world_size = hello.get_int();
  const int64_t greeted_rank = hello.get_int();
  const std::string client_nonce = hello.get_text();
  const auto refuse = [&](const std::string& refusal) {
    socket.send_frame(WireWriter().put("refused").put(refusal).bytes(), Deadline::after(kGreetingWait));
    return false;
  };
  if (run_id != admission_.run_id) return refuse("it belongs to run " + run_id + ", this is run " + admission_.run_id);
  if (admission_.rank_slots) {
    if (world_size != admission_.world_size) {
      return refuse("it says WORLD_SIZE=" + std::to_string(world_size) +
                    ", rank 0 has WORLD_SIZE=" + std::to_string(admission_.world_size));
    }
    if (greeted_rank < 0 || greeted_rank >= admission_.world_size) {
      return refuse("RANK=" + std::to_string(greeted_rank) + " is out of range");
    }
  } else if (greeted_rank < kAnyRank || greeted_rank > INT32_MAX) {
    return refuse("rank " + std::to_string(greeted_rank) + " is out of range");
  }
  const std::string server_nonce = greeting_nonce();
  const std::string rank_text = std::to_string(greeted_rank);
  const std::string& key = admission_.job_key;
  socket.send_frame(WireWriter()
                        .put("challenge")
                        .put(server_nonce)
                        .put(greeting_proof(key, "server", {run_id, rank_text, client_nonce, server_nonce}))
                        .bytes(),
                    Deadline::after(kGreetingWait));
  WireReader response(socket.recv_frame(Deadline::after(kGreetingWait), kMaxGreeting));
  const std::string expected = greeting_proof(key, "client", {run_id, rank_text, client_nonce, server_nonce});
  if (!same_mac(response.get(), expected)) {
    return refuse("it cannot prove that it knows this job's key (DDP_JOB_KEY): it is no rank of this job");
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!admission_.rank_slots && clients_ >= admission_.max_clients) {
      return refuse("the store has " + std::to_string(clients_) + " clients already");
    }
    if (admission_.rank_slots) {
      if (!joined_.insert(static_cast<int>(greeted_rank)).second) {
        return refuse("RANK=" + rank_text + " connected twice");
      }
      if (greeted_rank > 0) ++connected_ranks_;
    }
    ++clients_;
    pending_.erase(socket.fd());
    changed_.notify_all();
  }
  socket.send_frame(WireWriter().put("ok").bytes(), Deadline::after(kGreetingWait));
  rank = static_cast<int>(greeted_rank);
  return true;
}

void StoreServer::store(const std::string& key, std::string value, Client& client) {
  const auto old = values_.find(key);
  const size_t freed = old == values_.end() ? 0 : key.size() + old->second.size() + kEntryBytes;
  const size_t needed = key.size() + value.size() + kEntryBytes;
  if (old == values_.end() && client.keys_made >= kMaxKeysPerClient) {
    throw ExchangeError("a client made more than " + std::to_string(kMaxKeysPerClient) + " keys");
  }
  if (stored_bytes_ - freed + needed > kMaxStoreBytes) throw ExchangeError("the store is full");
  if (old == values_.end()) ++client.keys_made;
  stored_bytes_ = stored_bytes_ - freed + needed;
  values_[key] = std::move(value);
  changed_.notify_all();
}

std::string StoreServer::wait_for_keys(const std::vector<std::string>& keys, std::chrono::milliseconds wait) {
  std::unique_lock<std::mutex> lock(mutex_);
  const auto all_set = [&] {
    return std::all_of(keys.begin(), keys.end(), [&](const std::string& key) { return values_.count(key) != 0; });
  };
  const bool found = changed_.wait_for(lock, wait, [&] { return stopping_ || all_set(); });
  return WireWriter().put(found && !stopping_ ? "ok" : "timeout").bytes();
}

std::string StoreServer::answer(WireReader& request, Client& client) {
  const std::string op = request.get();
  if (op == "time") return WireWriter().put_int(wall_clock_ns()).bytes();
  if (op == "get") {
    const std::string key = request.get();
    const auto wait = std::chrono::milliseconds(request.get_int(0, INT32_MAX));
    std::unique_lock<std::mutex> lock(mutex_);
    const bool found = changed_.wait_for(lock, wait, [&] { return stopping_ || values_.count(key) != 0; });
    return found && !stopping_ ? WireWriter().put("value").put(values_.at(key)).bytes()
                               : WireWriter().put("timeout").bytes();
  }
  if (op == "wait") {
    const auto wait = std::chrono::milliseconds(request.get_int(0, INT32_MAX));
    const int64_t count = request.get_int(0, static_cast<int64_t>(kMaxFrame / kFieldPrefix));
    std::vector<std::string> keys;
    for (int64_t i = 0; i < count; ++i) keys.push_back(request.get());
    return wait_for_keys(keys, wait);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (op == "set") {
    const std::string key = request.get();
    store(key, request.get(), client);
    return WireWriter().put("ok").bytes();
  }
  if (op == "add") {
    const std::string key = request.get();
    const int64_t delta = request.get_int();
    const auto found = values_.find(key);
    const std::optional<int64_t> held = found == values_.end() ? std::optional<int64_t>{0} : parse_int(found->second);
    if (!held) throw ExchangeError("add to a key without a number");
    int64_t sum = *held;
    if (__builtin_add_overflow(sum, delta, &sum)) throw ExchangeError("add past the range of a 64-bit number");
    store(key, std::to_string(sum), client);
    return WireWriter().put_int(sum).bytes();
  }
  if (op == "cas") {
    const std::string key = request.get();
    const std::string expected = request.get();
    std::string desired = request.get();
    const auto found = values_.find(key);
    // c10d's TCPStore: an absent key is set only where nothing was expected, and then reads as the desired value.
    if (found == values_.end() ? !expected.empty() : found->second != expected) {
      return WireWriter().put(found == values_.end() ? expected : found->second).bytes();
    }
    const std::string reply = WireWriter().put(desired).bytes();
    store(key, std::move(desired), client);
    return reply;
  }
  if (op == "delete") {
    const auto found = values_.find(request.get());
    if (found == values_.end()) return WireWriter().put_int(0).bytes();
    stored_bytes_ -= found->first.size() + found->second.size() + kEntryBytes;
    values_.erase(found);
    return WireWriter().put_int(1).bytes();
  }
  if (op == "check") {
    const int64_t count = request.get_int(0, static_cast<int64_t>(kMaxFrame / kFieldPrefix));
    bool all = true;
    for (int64_t i = 0; i < count; ++i) all = values_.count(request.get()) != 0 && all;
    return WireWriter().put_int(all ? 1 : 0).bytes();
  }
  if (op == "keys") return WireWriter().put_int(static_cast<int64_t>(values_.size())).bytes();
  throw ExchangeError("not a store request");
}

StoreClient::StoreClient(const std::string& host, uint16_t port, const Greeting& greeting,
                         std::chrono::milliseconds timeout)
    : where_(host_port(host, port)) {
  const Deadline deadline = Deadline::after(timeout);
  std::string reason = "timed out";
  while (!socket_.valid() && !deadline.expired()) {
    try {
      socket_ = Socket::connect_to(host, port, deadline);
    } catch (const NetError& e) {
      reason = e.what();
      // Rank 0 may simply not be listening yet: a launcher starts the ranks at about the same time.
      std::this_thread::sleep_for(std::min(kConnectRetryPause, std::chrono::milliseconds(deadline.poll_ms())));
    }
  }
  if (!socket_.valid()) {
    throw ExchangeError("cannot reach rank 0 at " + where_ + " within " + seconds_text(timeout) + ": " + reason +
                        " (is rank 0 running, does MASTER_ADDR resolve to its node, and do firewalls " +
                        "or security groups allow TCP port " + std::to_string(port) + " between the nodes?)");
  }
  socket_.set_no_delay();
  const std::string client_nonce = greeting_nonce();
  const std::string rank_text = std::to_string(greeting.rank);
  const std::string hello = WireWriter()
                                .put(kHello)
                                .put(greeting.run_id)
                                .put_int(greeting.world_size)
                                .put_int(greeting.rank)
                                .put(client_nonce)
                                .bytes();
  const std::string no_answer = "rank 0 at " + where_ + " did not answer";
  // A client given less than kGreetingWait (recovery's probe of a member that may be stopped) waits no longer for
  // the greeting either: whoever waits for the probe waits for its longest part.
  const auto greeting_wait = std::min<std::chrono::milliseconds>(kGreetingWait, timeout);
  WireReader challenge(request(hello, Deadline::after(greeting_wait), no_answer));
  const std::string verdict = challenge.get();
  // The server's first word is its challenge, with its proof, or a refusal: anything else (a bare "ok") is a server
  // that skips its proof, and gets no request.
  if (verdict != "challenge") {
    if (verdict == "refused") check_verdict(verdict, challenge, greeting.rank);
    throw ExchangeError(unproven(where_, "it answered the greeting without proving it"));
  }
  const std::string server_nonce = challenge.get();
  const std::string fields_proof = challenge.get();
  const std::vector<std::string> fields{greeting.run_id, rank_text, client_nonce, server_nonce};
  if (!same_mac(fields_proof, greeting_proof(greeting.job_key, "server", fields))) {
    throw ExchangeError(unproven(where_, "its proof does not verify"));
  }
  const std::string response = WireWriter().put(greeting_proof(greeting.job_key, "client", fields)).bytes();
  WireReader answer(request(response, Deadline::after(greeting_wait), no_answer));
  check_verdict(answer.get(), answer, greeting.rank);
}

void StoreClient::check_verdict(const std::string& verdict, WireReader& answer, int rank) const {
  if (verdict == "refused") {
    throw ExchangeError("rank 0 at " + where_ + " refused rank " + std::to_string(rank) + ": " + answer.get_text());
  }
  if (verdict != "ok") throw ExchangeError("rank 0 at " + where_ + " sent an unexpected reply");
}

std::string StoreClient::request(const std::string& message, Deadline deadline, const std::string& what) {
  if (broken_) throw ExchangeError(what + ": the connection to rank 0 at " + where_ + " failed earlier");
  try {
    socket_.send_frame(message, deadline);
    return socket_.recv_frame(deadline, kMaxFrame);
  } catch (const NetError& e) {
    broken_ = true;
    throw ExchangeError(what + ": " + e.what());
  }
}

void StoreClient::set(const std::string& key, const std::string& value, Deadline deadline) {
  request(WireWriter().put("set").put(key).put(value).bytes(), deadline, "storing " + key + " at " + where_);
}

std::string StoreClient::get(const std::string& key, const std::string& waiting_for, Deadline deadline) {
  const auto wait = std::chrono::milliseconds(deadline.poll_ms());
  WireReader answer(request(WireWriter().put("get").put(key).put_int(wait.count()).bytes(),
                            Deadline::after(wait + kLateReply), waiting_for));
  if (answer.get() != "value") throw ExchangeError(waiting_for + ": timed out");
  return answer.get();
}

int64_t StoreClient::server_time(Deadline deadline) {
  return WireReader(request(WireWriter().put("time").bytes(), deadline, "reading rank 0's clock")).get_int();
}

int64_t StoreClient::add(const std::string& key, int64_t delta, Deadline deadline) {
  return WireReader(request(WireWriter().put("add").put(key).put_int(delta).bytes(), deadline,
                            "adding to " + key + " at " + where_))
      .get_int();
}

std::string StoreClient::compare_set(const std::string& key, const std::string& expected, const std::string& desired,
                                     Deadline deadline) {
  return WireReader(request(WireWriter().put("cas").put(key).put(expected).put(desired).bytes(), deadline,
                            "comparing and setting " + key + " at " + where_))
      .get();
}

bool StoreClient::remove(const std::string& key, Deadline deadline) {
  return WireReader(request(WireWriter().put("delete").put(key).bytes(), deadline, "deleting " + key + " at " + where_))
             .get_int() == 1;
}

namespace {

WireWriter& put_keys(WireWriter& message, const std::vector<std::string>& keys) {
  message.put_int(static_cast<int64_t>(keys.size()));
  for (const std::string& key : keys) message.put(key);
  return message;
}

}  // namespace

bool StoreClient::check(const std::vector<std::string>& keys, Deadline deadline) {
  WireWriter message;
  message.put("check");
  return WireReader(request(put_keys(message, keys).bytes(), deadline, "checking keys at " + where_)).get_int() == 1;
}

int64_t StoreClient::key_count(Deadline deadline) {
  return WireReader(request(WireWriter().put("keys").bytes(), deadline, "counting keys at " + where_)).get_int();
}

bool StoreClient::wait(const std::vector<std::string>& keys, Deadline deadline) {
  const auto wait = std::chrono::milliseconds(deadline.poll_ms());
  WireWriter message;
  message.put("wait").put_int(wait.count());
  return WireReader(request(put_keys(message, keys).bytes(), Deadline::after(wait + kLateReply),
                            "waiting for keys at " + where_))
             .get() == "ok";
}

}  // namespace ddp
