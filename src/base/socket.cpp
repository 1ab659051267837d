#include "base/socket.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <memory>

namespace ddp {
namespace {

[[noreturn]] void fail_errno(const std::string& what) { throw NetError(what + ": " + std::strerror(errno)); }

int open_nonblocking(int family) {
  const int fd = ::socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) fail_errno("socket");
  return fd;
}

}  // namespace

AddressList resolve(const std::string& host, uint16_t port, int socket_type, int flags) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = socket_type;
  hints.ai_flags = flags;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  const int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &found);
  if (rc != 0 || found == nullptr) throw NetError(gai_strerror(rc));
  return AddressList(found, freeaddrinfo);
}

int Deadline::poll_ms() const {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(at_ - Clock::now()).count();
  if (left <= 0) return 0;
  return left > 1 << 30 ? 1 << 30 : static_cast<int>(left);
}

Socket::~Socket() {
  if (fd_ >= 0) ::close(fd_);
}

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.release();
  }
  return *this;
}

int Socket::release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

void Socket::wait_for(short events, Deadline deadline, const char* what) const {
  for (;;) {
    pollfd entry{fd_, events, 0};
    const int rc = ::poll(&entry, 1, deadline.poll_ms());
    if (rc > 0) return;
    if (rc == 0) throw NetError(std::string("timed out ") + what);
    if (errno != EINTR) fail_errno(what);
  }
}

Socket Socket::connect_to(const std::string& host, uint16_t port, Deadline deadline) {
  AddressList addresses(nullptr, freeaddrinfo);
  try {
    addresses = resolve(host, port, SOCK_STREAM, 0);
  } catch (const NetError& e) {
    throw NetError("cannot resolve " + host + ": " + e.what());
  }
  std::string last_reason = "no address";
  for (const addrinfo* a = addresses.get(); a != nullptr; a = a->ai_next) {
    Socket socket(open_nonblocking(a->ai_family));
    if (::connect(socket.fd_, a->ai_addr, a->ai_addrlen) != 0) {
      if (errno != EINPROGRESS) {
        last_reason = std::strerror(errno);
        continue;
      }
      try {
        socket.wait_for(POLLOUT, deadline, "connecting");
      } catch (const NetError& e) {
        last_reason = e.what();
        continue;
      }
      int error = 0;
      socklen_t length = sizeof error;
      getsockopt(socket.fd_, SOL_SOCKET, SO_ERROR, &error, &length);
      if (error != 0) {
        last_reason = std::strerror(error);
        continue;
      }
    }
    return socket;
  }
  // Lower case, like strerror's other reasons, so that callers can put it mid-sentence.
  if (!last_reason.empty()) last_reason[0] = static_cast<char>(std::tolower(last_reason[0]));
  throw NetError(last_reason);
}

Socket Socket::listen_on(const std::string& address, uint16_t port) {
  const AddressList addresses =
      resolve(address, port, SOCK_STREAM, AI_PASSIVE | (address.empty() ? 0 : AI_NUMERICHOST));
  // For "every address" prefer the IPv6 wildcard with IPv4 mapped in: one socket serves both families.
  const addrinfo* chosen = addresses.get();
  for (const addrinfo* a = addresses.get(); address.empty() && a != nullptr; a = a->ai_next) {
    if (a->ai_family == AF_INET6) chosen = a;
  }
  Socket socket(open_nonblocking(chosen->ai_family));
  const int on = 1;
  const int off = 0;
  setsockopt(socket.fd_, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  if (chosen->ai_family == AF_INET6) setsockopt(socket.fd_, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);
  if (::bind(socket.fd_, chosen->ai_addr, chosen->ai_addrlen) != 0) {
    fail_errno("cannot listen on " + host_port(address.empty() ? "*" : address, port));
  }
  if (::listen(socket.fd_, SOMAXCONN) != 0) fail_errno("listen");
  return socket;
}

Socket Socket::accept(Deadline deadline) const {
  for (;;) {
    wait_for(POLLIN, deadline, "waiting for a connection");
    const int fd = ::accept4(fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) return Socket(fd);
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED) fail_errno("accept");
  }
}

void Socket::send_all(std::string_view bytes, Deadline deadline) const {
  while (!bytes.empty()) {
    const ssize_t sent = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (sent > 0) {
      bytes.remove_prefix(static_cast<size_t>(sent));
    } else if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      wait_for(POLLOUT, deadline, "sending");
    } else {
      fail_errno("send");
    }
  }
}

void Socket::recv_exact(char* buffer, size_t size, Deadline deadline) const {
  while (size > 0) {
    const ssize_t got = ::recv(fd_, buffer, size, 0);
    if (got > 0) {
      buffer += got;
      size -= static_cast<size_t>(got);
    } else if (got == 0) {
      throw NetError("connection closed by the peer");
    } else if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      wait_for(POLLIN, deadline, "receiving");
    } else {
      fail_errno("recv");
    }
  }
}

void Socket::send_frame(std::string_view bytes, Deadline deadline) const {
  const uint32_t length = static_cast<uint32_t>(bytes.size());
  char prefix[4];
  for (int i = 0; i < 4; ++i) prefix[i] = static_cast<char>((length >> (8 * i)) & 0xff);
  std::string frame(prefix, sizeof prefix);
  frame.append(bytes);
  send_all(frame, deadline);
}

std::string Socket::recv_frame(Deadline deadline, size_t max_bytes) const {
  unsigned char prefix[4];
  recv_exact(reinterpret_cast<char*>(prefix), sizeof prefix, deadline);
  const uint32_t length = prefix[0] | prefix[1] << 8 | prefix[2] << 16 | static_cast<uint32_t>(prefix[3]) << 24;
  if (length > max_bytes) throw NetError("message of " + std::to_string(length) + " bytes is too large");
  std::string bytes(length, '\0');
  recv_exact(bytes.data(), length, deadline);
  return bytes;
}

void Socket::set_no_delay() const {
  const int on = 1;
  setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
}

uint16_t Socket::local_port() const {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  if (getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length) != 0) fail_errno("getsockname");
  if (address.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&address)->sin6_port);
  return ntohs(reinterpret_cast<sockaddr_in*>(&address)->sin_port);
}

std::string host_port(const std::string& host, uint16_t port) {
  const bool ipv6 = host.find(':') != std::string::npos;
  return (ipv6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

}  // namespace ddp
