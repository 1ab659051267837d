#include "doctor/interface.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <memory>

#include "parse.hpp"

namespace ddp::doctor {
namespace {

using InterfaceList = std::unique_ptr<ifaddrs, decltype(&freeifaddrs)>;

InterfaceList interface_list() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) list = nullptr;
  return InterfaceList(list, freeifaddrs);
}

std::optional<std::string> numeric(const sockaddr* address) {
  if (address == nullptr || (address->sa_family != AF_INET && address->sa_family != AF_INET6)) return std::nullopt;
  const socklen_t length = address->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
  char text[NI_MAXHOST];
  if (getnameinfo(address, length, text, sizeof text, nullptr, 0, NI_NUMERICHOST) != 0) return std::nullopt;
  return std::string(text);
}

bool is_link_local(const sockaddr* address) {
  return address->sa_family == AF_INET6 &&
         IN6_IS_ADDR_LINKLOCAL(&reinterpret_cast<const sockaddr_in6*>(address)->sin6_addr);
}

std::optional<long> read_speed(const std::string& sysfs_root, const std::string& name) {
  std::ifstream file(sysfs_root + "/class/net/" + name + "/speed");
  long speed = 0;
  // Virtual interfaces fail the read (EINVAL) or report -1; both mean "unknown".
  if (!(file >> speed) || speed <= 0) return std::nullopt;
  return speed;
}

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t at; (at = text.find(separator, start)) != std::string::npos; start = at + 1) {
    if (at > start) parts.push_back(text.substr(start, at - start));
  }
  if (start < text.size()) parts.push_back(text.substr(start));
  return parts;
}

// NCCL_SOCKET_IFNAME entries match name prefixes ("eth" matches eth0), or whole names after '='.
InterfaceChoice from_nccl_list(const std::string& value) {
  const bool exact = !value.empty() && value[0] == '=';
  const auto entries = split(exact ? value.substr(1) : value, ',');
  for (const auto& name : list_interfaces()) {
    for (const auto& entry : entries) {
      if (exact ? name == entry : name.rfind(entry, 0) == 0) return {name, "NCCL_SOCKET_IFNAME", ""};
    }
  }
  return {"", "NCCL_SOCKET_IFNAME",
          "no interface on this node matches NCCL_SOCKET_IFNAME=" + quote(value) + "; `ip -br link` lists them"};
}

}  // namespace

InterfaceInfo read_interface(const std::string& name, const std::string& sysfs_root) {
  InterfaceInfo info;
  info.name = name;
  std::vector<std::string> ipv6;
  const InterfaceList list = interface_list();
  for (const ifaddrs* entry = list.get(); entry != nullptr; entry = entry->ifa_next) {
    if (name != entry->ifa_name) continue;
    info.exists = true;
    info.up = (entry->ifa_flags & IFF_UP) != 0;
    info.running = (entry->ifa_flags & IFF_RUNNING) != 0;
    const auto address = numeric(entry->ifa_addr);
    if (!address || is_link_local(entry->ifa_addr)) continue;
    (entry->ifa_addr->sa_family == AF_INET ? info.addresses : ipv6).push_back(*address);
  }
  info.addresses.insert(info.addresses.end(), ipv6.begin(), ipv6.end());
  if (info.exists) info.speed_mbps = read_speed(sysfs_root, name);
  return info;
}

std::vector<std::string> list_interfaces() {
  std::vector<std::string> names;
  const InterfaceList list = interface_list();
  for (const ifaddrs* entry = list.get(); entry != nullptr; entry = entry->ifa_next) {
    if (std::find(names.begin(), names.end(), entry->ifa_name) == names.end()) names.push_back(entry->ifa_name);
  }
  return names;
}

std::optional<Route> route_to(const std::string& numeric_address) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  hints.ai_flags = AI_NUMERICHOST;
  addrinfo* found = nullptr;
  // Port 9 (discard): any port does, since a UDP connect() only asks the routing table and sends nothing.
  if (getaddrinfo(numeric_address.c_str(), "9", &hints, &found) != 0) return std::nullopt;
  const std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> owner(found, freeaddrinfo);
  const int fd = socket(found->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::nullopt;
  sockaddr_storage local{};
  socklen_t length = sizeof local;
  const bool routed = connect(fd, found->ai_addr, found->ai_addrlen) == 0 &&
                      getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0;
  close(fd);
  if (!routed) return std::nullopt;
  const auto source = numeric(reinterpret_cast<const sockaddr*>(&local));
  if (!source) return std::nullopt;
  const InterfaceList list = interface_list();
  for (const ifaddrs* entry = list.get(); entry != nullptr; entry = entry->ifa_next) {
    if (numeric(entry->ifa_addr) == source) return Route{*source, entry->ifa_name};
  }
  return std::nullopt;
}

bool is_local_address(const std::string& numeric_address) {
  const InterfaceList list = interface_list();
  for (const ifaddrs* entry = list.get(); entry != nullptr; entry = entry->ifa_next) {
    if (numeric(entry->ifa_addr) == numeric_address) return true;
  }
  return false;
}

InterfaceChoice choose_interface(const std::optional<std::string>& option, const EnvLookup& env,
                                 const std::string& master_ip) {
  if (option) return {*option, "--interface", ""};
  if (const auto gloo = env("GLOO_SOCKET_IFNAME"); gloo && !gloo->empty()) {
    return {split(*gloo, ',').front(), "GLOO_SOCKET_IFNAME", ""};
  }
  if (const auto nccl = env("NCCL_SOCKET_IFNAME"); nccl && !nccl->empty() && (*nccl)[0] != '^') {
    return from_nccl_list(*nccl);
  }
  if (master_ip.empty()) return {"", "route to MASTER_ADDR", "MASTER_ADDR is unknown, so no route picks an interface"};
  if (const auto route = route_to(master_ip)) return {route->interface, "route to MASTER_ADDR", ""};
  return {"", "route to MASTER_ADDR",
          "no route from this node to MASTER_ADDR " + master_ip + "; check `ip route get " + master_ip + "`"};
}

CheckResult check_interface(const InterfaceChoice& choice, const InterfaceInfo& info) {
  const std::string check = "net.interface";
  const std::string threshold = "up, carrier, address";
  const std::string from = " (chosen by " + choice.source + ")";
  if (!choice.error.empty()) return make_result(check, Status::Fail, "none", threshold, choice.error);
  const std::string name = quote(choice.name);
  auto fail = [&](const std::string& value, const std::string& why) {
    return make_result(check, Status::Fail, value, threshold, why + from);
  };
  if (!info.exists) return fail("missing", "no interface " + name + " on this node; `ip -br link` lists them");
  if (!info.up) {
    return fail(choice.name + " down", name + " is down: bring it up (ip link set " + choice.name +
                                           " up) or choose another with --interface / GLOO_SOCKET_IFNAME");
  }
  if (!info.running) {
    return fail(choice.name + " no carrier", name + " is up but has no carrier: check the cable, switch port or VF");
  }
  if (info.addresses.empty()) {
    return fail(choice.name + " no address", name + " has no IP address, and Gloo and NCCL sockets need one");
  }
  return make_result(check, Status::Ok, choice.name + " up " + info.addresses.front(), threshold,
                     "chosen by " + choice.source);
}

CheckResult check_link_speed(const InterfaceInfo& info, double min_gbps) {
  const std::string check = "net.link_speed";
  if (!info.exists || !info.up) return skipped(check, "interface " + quote(info.name) + " is not usable");
  if (!info.speed_mbps) {
    return skipped(check, info.name + " reports no link speed (a virtual interface); net.p2p_bw measures what it carries");
  }
  const double gbps = static_cast<double>(*info.speed_mbps) / 1000;
  const std::string threshold = ">= " + format_fixed(min_gbps, min_gbps == static_cast<long>(min_gbps) ? 0 : 1) +
                                " Gbit/s";
  const Status status = grade_at_least(gbps, min_gbps, 0);
  return make_result(check, status, info.name + " " + std::to_string(*info.speed_mbps) + " Mb/s", threshold,
                     status == Status::Ok ? "" : "slower than distributed training needs between nodes; use a "
                                                 "faster interface (--interface) or upgrade the link");
}

}  // namespace ddp::doctor
