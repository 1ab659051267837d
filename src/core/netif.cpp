#include "core/netif.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <utility>

#include "base/parse.hpp"
#include "base/socket.hpp"
#include "core/error.hpp"

namespace ddp {
namespace {

std::optional<IpAddress> ip_address(const sockaddr* address) {
  if (address == nullptr) return std::nullopt;
  IpAddress ip;
  ip.family = address->sa_family;
  if (ip.family == AF_INET) {
    std::memcpy(ip.bytes.data(), &reinterpret_cast<const sockaddr_in*>(address)->sin_addr, 4);
  } else if (ip.family == AF_INET6) {
    std::memcpy(ip.bytes.data(), &reinterpret_cast<const sockaddr_in6*>(address)->sin6_addr, 16);
  } else {
    return std::nullopt;
  }
  return ip;
}

unsigned prefix_length(const sockaddr* netmask) {
  const auto mask = ip_address(netmask);
  if (!mask) return 0;
  unsigned bits = 0;
  for (uint8_t byte : mask->bytes) bits += static_cast<unsigned>(__builtin_popcount(byte));
  return bits;
}

bool same_subnet(const IpAddress& interface_address, const IpAddress& other) {
  if (interface_address.family != other.family) return false;
  const unsigned bits = interface_address.prefix_length;
  for (unsigned i = 0; i < bits / 8; ++i) {
    if (interface_address.bytes[i] != other.bytes[i]) return false;
  }
  if (bits % 8 == 0) return true;
  const uint8_t mask = static_cast<uint8_t>(0xff << (8 - bits % 8));
  return (interface_address.bytes[bits / 8] & mask) == (other.bytes[bits / 8] & mask);
}

bool same_address(const IpAddress& a, const IpAddress& b) {
  const size_t length = a.family == AF_INET ? 4 : 16;
  return a.family == b.family &&
         std::equal(a.bytes.begin(), a.bytes.begin() + static_cast<long>(length), b.bytes.begin());
}

// The master's address (UDP, numeric: any port does, nothing is sent); throws ddp::Error naming it.
AddressList master_address(const std::string& numeric) {
  try {
    return resolve(numeric, 9, SOCK_DGRAM, AI_NUMERICHOST);
  } catch (const NetError& e) {
    throw Error("MASTER_ADDR " + quote(numeric) + " is not a numeric IPv4 or IPv6 address (" + e.what() +
                "); resolve the host name first");
  }
}

IpAddress numeric_address(const std::string& text) { return *ip_address(master_address(text)->ai_addr); }

// The source address the kernel would use towards `master`; no packet leaves, a UDP connect() only routes.
IpAddress source_address_towards(const std::string& master) {
  const AddressList destination = master_address(master);
  const Socket udp(socket(destination->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!udp.valid() || connect(udp.fd(), destination->ai_addr, destination->ai_addrlen) != 0) {
    throw Error("MASTER_ADDR " + quote(master) + " cannot be reached from this node: " + std::strerror(errno) +
                "; check the routing table (ip route get " + master + ")");
  }
  sockaddr_storage local{};
  socklen_t length = sizeof local;
  if (getsockname(udp.fd(), reinterpret_cast<sockaddr*>(&local), &length) != 0) {
    throw Error("cannot read the source address towards MASTER_ADDR " + quote(master) + ": " + std::strerror(errno));
  }
  return *ip_address(reinterpret_cast<const sockaddr*>(&local));
}

std::string interface_holding(const std::vector<Interface>& interfaces, const IpAddress& address,
                              const std::string& master) {
  for (const Interface& interface : interfaces) {
    for (const IpAddress& own : interface.addresses) {
      if (same_address(own, address)) return interface.name;
    }
  }
  throw Error("no interface holds the address this node uses towards MASTER_ADDR " + quote(master) +
              "; its interfaces: " + describe_interfaces(interfaces));
}

const Interface* find_interface(const NetworkView& network, const std::string& name) {
  return find_interface(network.interfaces, name);
}

bool usable(const Interface* interface) {
  return interface != nullptr && interface->up && !interface->addresses.empty();
}

bool on_master_subnet(const Interface& interface, const IpAddress& master) {
  return std::any_of(interface.addresses.begin(), interface.addresses.end(),
                     [&](const IpAddress& own) { return same_subnet(own, master); });
}

SocketInterface validated_override(const NetworkView& network, const std::string& name) {
  const Interface* interface = find_interface(network, name);
  const std::string problem = interface == nullptr           ? "there is no such interface on this node"
                              : !interface->up               ? "the interface is down"
                              : interface->addresses.empty() ? "the interface has no IP address"
                                                             : "";
  if (!problem.empty()) {
    throw Error("--ddp-nic " + quote(name) + ": " + problem + "; name one of " +
                describe_interfaces(network.interfaces) + ", or use --ddp-nic=auto");
  }
  return {name, SocketReason::Override};
}

// The master is this node under a loopback address: peers must be given an interface they can reach instead.
SocketInterface beside_loopback_master(const NetworkView& network, const std::optional<std::string>& preferred) {
  if (preferred && usable(find_interface(network, *preferred))) return {*preferred, SocketReason::ClosestNic};
  std::vector<const Interface*> candidates;
  for (const Interface& interface : network.interfaces) {
    if (!interface.loopback && usable(&interface)) candidates.push_back(&interface);
  }
  if (candidates.size() == 1) return {candidates.front()->name, SocketReason::OnlyInterface};
  throw Error("MASTER_ADDR " + quote(network.master_address) +
              " is a loopback address of this node, which other nodes cannot use, and no single interface stands "
              "out; set --ddp-nic to one of " +
              describe_interfaces(network.interfaces) +
              ", or make the host name resolve to that interface's address in /etc/hosts");
}

}  // namespace

const char* to_string(SocketReason reason) {
  switch (reason) {
    case SocketReason::Override: return "--ddp-nic";
    case SocketReason::ClosestNic: return "closest NIC";
    case SocketReason::Route: return "route to master";
    case SocketReason::OnlyInterface: return "only interface up";
  }
  return "?";
}

std::vector<Interface> list_interfaces() {
  ifaddrs* raw = nullptr;
  if (getifaddrs(&raw) != 0) throw Error(std::string("cannot list network interfaces: ") + std::strerror(errno));
  const std::unique_ptr<ifaddrs, decltype(&freeifaddrs)> owner(raw, freeifaddrs);
  std::vector<Interface> interfaces;
  for (const ifaddrs* entry = raw; entry != nullptr; entry = entry->ifa_next) {
    if (entry->ifa_name == nullptr) continue;
    auto found = std::find_if(interfaces.begin(), interfaces.end(),
                              [&](const Interface& i) { return i.name == entry->ifa_name; });
    if (found == interfaces.end()) {
      Interface interface;
      interface.name = entry->ifa_name;
      found = interfaces.insert(interfaces.end(), std::move(interface));
    }
    found->switched_on = entry->ifa_flags & IFF_UP;
    found->up = found->switched_on && (entry->ifa_flags & IFF_RUNNING);
    found->loopback = entry->ifa_flags & IFF_LOOPBACK;
    if (auto address = ip_address(entry->ifa_addr)) {
      address->prefix_length = prefix_length(entry->ifa_netmask);
      found->addresses.push_back(*address);
    }
  }
  std::sort(interfaces.begin(), interfaces.end(),
            [](const Interface& a, const Interface& b) { return a.name < b.name; });
  return interfaces;
}

const Interface* find_interface(const std::vector<Interface>& interfaces, const std::string& name) {
  for (const Interface& interface : interfaces) {
    if (interface.name == name) return &interface;
  }
  return nullptr;
}

std::string route_to(const std::vector<Interface>& interfaces, const std::string& master_address) {
  return interface_holding(interfaces, source_address_towards(master_address), master_address);
}

bool holds_address(const std::vector<Interface>& interfaces, const std::string& numeric) {
  const AddressList parsed = resolve(numeric, 9, SOCK_DGRAM, AI_NUMERICHOST);
  const IpAddress wanted = *ip_address(parsed->ai_addr);
  return std::any_of(interfaces.begin(), interfaces.end(), [&](const Interface& interface) {
    return std::any_of(interface.addresses.begin(), interface.addresses.end(),
                       [&](const IpAddress& own) { return same_address(own, wanted); });
  });
}

std::string host_name() {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  return name;
}

std::string advertised_address(const std::vector<std::string>& socket_ifnames) {
  if (socket_ifnames.empty()) return host_name();
  const std::string& name = socket_ifnames.front();
  const std::vector<Interface> interfaces = list_interfaces();
  if (const Interface* interface = find_interface(interfaces, name)) {
    for (const IpAddress& address : interface->addresses) {
      if (address.family == AF_INET) return to_string(address);
    }
  }
  throw Error("GLOO_SOCKET_IFNAME=" + quote(name) +
              " has no IPv4 address on this host; name an interface that "
              "ip addr lists");
}

std::string to_string(const IpAddress& address) {
  char text[INET6_ADDRSTRLEN] = {};
  inet_ntop(address.family, address.bytes.data(), text, sizeof text);
  return text;
}

bool is_link_local(const IpAddress& address) {
  return address.family == AF_INET6 && address.bytes[0] == 0xfe && (address.bytes[1] & 0xc0) == 0x80;
}

NetworkView read_network(const std::string& master_address) {
  NetworkView network;
  network.interfaces = list_interfaces();
  network.master_address = master_address;
  network.route = route_to(network.interfaces, master_address);
  return network;
}

SocketInterface choose_socket_interface(const NetworkView& network, const std::optional<std::string>& preferred,
                                        const std::optional<std::string>& override_name, bool multi_node) {
  if (override_name) return validated_override(network, *override_name);
  const Interface* route = find_interface(network, network.route);
  if (route != nullptr && route->loopback && multi_node) return beside_loopback_master(network, preferred);
  if (preferred) {
    const Interface* closest = find_interface(network, *preferred);
    if (usable(closest) &&
        (*preferred == network.route || on_master_subnet(*closest, numeric_address(network.master_address)))) {
      return {*preferred, SocketReason::ClosestNic};
    }
  }
  return {network.route, SocketReason::Route};
}

std::string describe_interfaces(const std::vector<Interface>& interfaces) {
  std::string text;
  for (const Interface& interface : interfaces) {
    if (!text.empty()) text += ", ";
    text += interface.name + (!interface.up ? " (down)" : interface.addresses.empty() ? " (no address)" : " (up)");
  }
  return text.empty() ? "none" : text;
}

}  // namespace ddp
