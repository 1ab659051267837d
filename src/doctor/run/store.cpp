#include "doctor/run/store.hpp"

#include <sys/socket.h>
#include <time.h>

#include <algorithm>
#include <thread>

#include "core/hmac.hpp"
#include "core/ports.hpp"

namespace ddp::doctor {
namespace {

constexpr const char* kHello = "ddp-doctor/3";
constexpr size_t kMaxGreeting = 4096;
constexpr auto kIdle = std::chrono::hours(24);  // between a rank's requests: until it or the server ends
constexpr auto kConnectRetryPause = std::chrono::milliseconds(100);
constexpr auto kLateReply = std::chrono::seconds(1);  // a get's "timeout" may come this much after its deadline

// 128 random bits, as a job's key is made.
std::string greeting_nonce() { return new_job_key(); }

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

StoreServer::StoreServer(uint16_t port, std::string run_id, int world_size, std::string job_key)
    : listener_(Socket::listen_on("", port)),
      port_(listener_.local_port()),
      run_id_(std::move(run_id)),
      world_size_(world_size),
      job_key_(std::move(job_key)),
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
                    [this] { return static_cast<int>(joined_.size()) == world_size_; });
  return {joined_.begin(), joined_.end()};
}

void StoreServer::wait_for_ranks_to_leave(Deadline deadline) {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait_for(lock, std::chrono::milliseconds(deadline.poll_ms()), [this] { return connected_ranks_ == 0; });
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
    connections_.insert(socket.fd());
    pending_.emplace(socket.fd(), arrivals_++);
    ++threads_;
    std::thread([this, s = std::move(socket)]() mutable { serve(std::move(s)); }).detach();
  }
  --threads_;
  changed_.notify_all();
}

void StoreServer::serve(Socket socket) {
  int rank = -1;
  try {
    rank = admit(socket);
    while (rank >= 0) {
      WireReader request(socket.recv_frame(Deadline::after(kIdle), kMaxFrame));
      answer(socket, request);
    }
  } catch (const std::exception&) {
    // closed, silent past its greeting time, or not our protocol: the connection ends
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (rank > 0) --connected_ranks_;
  connections_.erase(socket.fd());
  pending_.erase(socket.fd());
  --threads_;
  changed_.notify_all();
}

int StoreServer::admit(const Socket& socket) {
  WireReader hello(socket.recv_frame(Deadline::after(kGreetingWait), kMaxGreeting));
  if (hello.get() != kHello) return -1;
  const std::string run_id = hello.get_text();
  const int64_t world_size = hello.get_int();
  const int64_t rank = hello.get_int();
  const std::string client_nonce = hello.get_text();
  const auto refuse = [&](const std::string& refusal) {
    socket.send_frame(WireWriter().put("refused").put(refusal).bytes(), Deadline::after(kGreetingWait));
    return -1;
  };
  if (run_id != run_id_) return refuse("it belongs to run " + run_id + ", this is run " + run_id_);
  if (world_size != world_size_) {
    return refuse("it says WORLD_SIZE=" + std::to_string(world_size) +
                  ", rank 0 has WORLD_SIZE=" + std::to_string(world_size_));
  }
  if (rank < 0 || rank >= world_size_) return refuse("RANK=" + std::to_string(rank) + " is out of range");
  const std::string server_nonce = greeting_nonce();
  const std::string rank_text = std::to_string(rank);
  socket.send_frame(WireWriter()
                        .put("challenge")
                        .put(server_nonce)
                        .put(greeting_proof(job_key_, "server", {run_id_, rank_text, client_nonce, server_nonce}))
                        .bytes(),
                    Deadline::after(kGreetingWait));
  WireReader response(socket.recv_frame(Deadline::after(kGreetingWait), kMaxGreeting));
  const std::string expected = greeting_proof(job_key_, "client", {run_id_, rank_text, client_nonce, server_nonce});
  if (!same_mac(response.get(), expected)) {
    return refuse("it cannot prove that it knows this job's key (DDP_JOB_KEY): it is no rank of this job");
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!joined_.insert(static_cast<int>(rank)).second) {
      return refuse("RANK=" + rank_text + " connected twice");
    }
    pending_.erase(socket.fd());
    if (rank > 0) ++connected_ranks_;
    changed_.notify_all();
  }
  socket.send_frame(WireWriter().put("ok").bytes(), Deadline::after(kGreetingWait));
  return static_cast<int>(rank);
}

void StoreServer::answer(const Socket& socket, WireReader& request) {
  const std::string op = request.get();
  std::string reply;
  if (op == "time") {
    reply = WireWriter().put_int(wall_clock_ns()).bytes();
  } else if (op == "set") {
    const std::string key = request.get();
    std::string value = request.get();
    std::lock_guard<std::mutex> lock(mutex_);
    if (stored_bytes_ + value.size() > kMaxStoreBytes || values_.count(key) != 0) {
      throw ExchangeError("a key set twice, or the store is full");
    }
    stored_bytes_ += key.size() + value.size();
    values_.emplace(key, std::move(value));
    changed_.notify_all();
  } else if (op == "get") {
    const std::string key = request.get();
    const auto wait = std::chrono::milliseconds(request.get_int(0, INT32_MAX));
    std::unique_lock<std::mutex> lock(mutex_);
    const bool found = changed_.wait_for(lock, wait, [&] { return stopping_ || values_.count(key) != 0; });
    reply = found && !stopping_ ? WireWriter().put("value").put(values_.at(key)).bytes()
                                : WireWriter().put("timeout").bytes();
  } else {
    throw ExchangeError("not a store request");
  }
  socket.send_frame(reply, Deadline::after(kIdle));
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
    throw ExchangeError("cannot reach rank 0 at " + where_ + " within " +
                        format_fixed(static_cast<double>(timeout.count()) / 1000, timeout.count() % 1000 ? 1 : 0) +
                        " s: " + reason +
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
  WireReader challenge(request(hello, Deadline::after(kGreetingWait), no_answer));
  const std::string verdict = challenge.get();
  if (verdict == "challenge") {
    const std::string server_nonce = challenge.get();
    const std::string fields_proof = challenge.get();
    const std::vector<std::string> fields{greeting.run_id, rank_text, client_nonce, server_nonce};
    if (!same_mac(fields_proof, greeting_proof(greeting.job_key, "server", fields))) {
      throw ExchangeError("what answers at " + where_ + " cannot prove that it knows this job's key (DDP_JOB_KEY): " +
                          "it is not this job's rank 0, another program holds the port; choose another port " +
                          "(srun --ddp-port=N, or MASTER_PORT)");
    }
    const std::string response = WireWriter().put(greeting_proof(greeting.job_key, "client", fields)).bytes();
    WireReader answer(request(response, Deadline::after(kGreetingWait), no_answer));
    check_verdict(answer.get(), answer, greeting.rank);
    return;
  }
  check_verdict(verdict, challenge, greeting.rank);
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
  request(WireWriter().put("set").put(key).put(value).bytes(), deadline, "storing " + key + " at rank 0");
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

}  // namespace ddp::doctor
