#include "base/resolve.hpp"

#include <netdb.h>
#include <sys/socket.h>

#include <memory>

#include "base/parse.hpp"
#include "core/error.hpp"

namespace ddp {

std::string resolve_host(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (rc != 0 || found == nullptr) {
    throw Error("MASTER_ADDR " + quote(host) + " (the step's first node) does not resolve on this node: " +
                gai_strerror(rc) + "; add it to DNS or /etc/hosts on every node");
  }
  const std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> owner(found, freeaddrinfo);
  char text[NI_MAXHOST];
  if (getnameinfo(found->ai_addr, found->ai_addrlen, text, sizeof text, nullptr, 0, NI_NUMERICHOST) != 0) {
    throw Error("MASTER_ADDR " + quote(host) + " resolved to an address that cannot be printed");
  }
  return text;
}

}  // namespace ddp
