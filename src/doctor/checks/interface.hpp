#pragma once
// The socket interface Gloo and NCCL will use: which one, whether it is up, its address and link speed.
// Reads only the kernel's state (the core's interface list and route, netif.hpp, and sysfs).
#include <optional>
#include <string>
#include <vector>

#include "core/env.hpp"
#include "doctor/checks/check.hpp"

namespace ddp::doctor {

struct InterfaceInfo {
  std::string name;
  bool exists = false;
  bool up = false;                     // IFF_UP: switched on
  bool running = false;                // IFF_RUNNING: has a carrier
  std::vector<std::string> addresses;  // numeric; IPv4 first, then IPv6 other than link-local
  std::optional<long> speed_mbps;      // /sys/class/net/NAME/speed; none for virtual interfaces
};

InterfaceInfo read_interface(const std::string& name, const std::string& sysfs_root = "/sys");

// Whether an interface of this node holds `numeric_address`.
bool is_local_address(const std::string& numeric_address);

struct InterfaceChoice {
  std::string name;    // empty when `error` says why none could be chosen
  std::string source;  // "--interface", "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "route to MASTER_ADDR"
  std::string error;
};

// The interface as Gloo would pick it: --interface, else GLOO_SOCKET_IFNAME (its first entry), else a
// concrete NCCL_SOCKET_IFNAME (entries are name prefixes unless they start with '='; '^' lists only exclude,
// so they choose nothing), else the interface of the route to MASTER_ADDR (`master_ip`, numeric).
InterfaceChoice choose_interface(const std::optional<std::string>& option, const EnvLookup& env,
                                 const std::string& master_ip);

// net.interface: the chosen interface exists, is up, has a carrier and an address.
CheckResult check_interface(const InterfaceChoice& choice, const InterfaceInfo& info);
// net.link_speed: WARN under `min_gbps` (the guides' 10 Gbit/s).
CheckResult check_link_speed(const InterfaceInfo& info, double min_gbps);

}  // namespace ddp::doctor
