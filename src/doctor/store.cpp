#include "doctor/store.hpp"

#include <sys/socket.h>
#include <time.h>

#include <algorithm>
#include <thread>

namespace ddp::doctor {
namespace {

constexpr const char* kHello = "ddp-doctor/2";
constexpr size_t kMaxGreeting = 4096;
constexpr size_t kSpareConnections = 64;        // beyond the ranks: more strangers are turned away at once
constexpr auto kIdle = std::chrono::hours(24);  // between a rank's requests: until it or the server ends
constexpr auto kRetryPause = std::chrono::milliseconds(100);
constexpr auto kLateReply = std::chrono::seconds(1);  // a get's "timeout" may come this much after its deadline

}  // namespace

int64_t wall_clock_ns() {
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  return static_cast<int64_t>(now.tv_sec) * 1000000000 + now.tv_nsec;
}

StoreServer::StoreServer(uint16_t port, std::string run_id, int world_size)
    : listener_(Socket::listen_on("", port)),
      port_(listener_.local_port()),
      run_id_(std::move(run_id)),
      world_size_(world_size),
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
    if (!socket.valid() || connections_.size() >= static_cast<size_t>(world_size_) + kSpareConnections) continue;
    connections_.insert(socket.fd());
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
  --threads_;
  changed_.notify_all();
}

int StoreServer::admit(const Socket& socket) {
  WireReader hello(socket.recv_frame(Deadline::after(kGreetingWait), kMaxGreeting));
  if (hello.get() != kHello) return -1;
  const std::string run_id = hello.get_text();
  const int64_t world_size = hello.get_int();
  const int64_t rank = hello.get_int();
  std::string refusal;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (run_id != run_id_) {
      refusal = "it belongs to run " + run_id + ", this is run " + run_id_;
    } else if (world_size != world_size_) {
      refusal =
          "it says WORLD_SIZE=" + std::to_string(world_size) + ", rank 0 has WORLD_SIZE=" + std::to_string(world_size_);
    } else if (rank < 0 || rank >= world_size_) {
      refusal = "RANK=" + std::to_string(rank) + " is out of range";
    } else if (!joined_.insert(static_cast<int>(rank)).second) {
      refusal = "RANK=" + std::to_string(rank) + " connected twice";
    } else if (rank > 0) {
      ++connected_ranks_;
    }
    changed_.notify_all();
  }
  socket.send_frame(refusal.empty() ? WireWriter().put("ok").bytes() : WireWriter().put("refused").put(refusal).bytes(),
                    Deadline::after(kGreetingWait));
  return refusal.empty() ? static_cast<int>(rank) : -1;
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
      std::this_thread::sleep_for(std::min(kRetryPause, std::chrono::milliseconds(deadline.poll_ms())));
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
  const std::string hello =
      WireWriter().put(kHello).put(greeting.run_id).put_int(greeting.world_size).put_int(greeting.rank).bytes();
  WireReader answer(request(hello, Deadline::after(kGreetingWait), "rank 0 at " + where_ + " did not answer"));
  const std::string verdict = answer.get();
  if (verdict == "refused") {
    throw ExchangeError("rank 0 at " + where_ + " refused rank " + std::to_string(greeting.rank) + ": " +
                        answer.get_text());
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
