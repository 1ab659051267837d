#pragma once
// Sockets with a deadline on every call, so that nothing waits for a peer longer than it was told to, and the
// one wrapper of getaddrinfo.
#include <netdb.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

namespace ddp {

class Deadline {
 public:
  using Clock = std::chrono::steady_clock;
  static Deadline after(std::chrono::milliseconds duration) { return Deadline(Clock::now() + duration); }
  bool expired() const { return Clock::now() >= at_; }
  // Milliseconds left, rounded up so that a wait never ends before the deadline; 0 once expired.
  int poll_ms() const;

 private:
  explicit Deadline(Clock::time_point at) : at_(at) {}
  Clock::time_point at_;
};

// A socket call failed or ran out of time; what() is the reason only ("connection refused", "timed out"),
// callers add who and where.
class NetError : public std::runtime_error {
 public:
  explicit NetError(const std::string& reason) : std::runtime_error(reason) {}
};

// getaddrinfo(`host`, `port`) of SOCK_STREAM or SOCK_DGRAM addresses; `host` empty: the wildcard addresses
// (with AI_PASSIVE). Throws NetError with gai_strerror's reason.
using AddressList = std::unique_ptr<addrinfo, decltype(&freeaddrinfo)>;
AddressList resolve(const std::string& host, uint16_t port, int socket_type, int flags);

class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket();
  Socket(Socket&& other) noexcept : fd_(other.release()) {}
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  // `host` is a name or a numeric address; every address it resolves to is tried before the deadline.
  static Socket connect_to(const std::string& host, uint16_t port, Deadline deadline);
  // `address` empty: every address of the node (IPv6 and IPv4); port 0: an ephemeral port.
  static Socket listen_on(const std::string& address, uint16_t port);

  Socket accept(Deadline deadline) const;
  void send_all(std::string_view bytes, Deadline deadline) const;
  void recv_exact(char* buffer, size_t size, Deadline deadline) const;
  // A message: 4-byte little-endian length, then the bytes. recv_frame refuses lengths over `max_bytes`.
  void send_frame(std::string_view bytes, Deadline deadline) const;
  std::string recv_frame(Deadline deadline, size_t max_bytes) const;

  void set_no_delay() const;
  uint16_t local_port() const;
  bool valid() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  int release();

 private:
  void wait_for(short events, Deadline deadline, const char* what) const;
  int fd_ = -1;
};

// A numeric address and port for messages: "10.0.0.1:29500", "[fe80::1]:29500".
std::string host_port(const std::string& host, uint16_t port);

}  // namespace ddp
