#include "doctor/checks/interface.hpp"

#include <sys/socket.h>

#include <algorithm>
#include <fstream>

#include "base/parse.hpp"
#include "core/env_names.hpp"
#include "core/error.hpp"
#include "core/netif.hpp"

namespace ddp::doctor {
namespace {

std::optional<long> read_speed(const std::string& sysfs_root, const std::string& name) {
  std::ifstream file(sysfs_root + "/class/net/" + name + "/speed");
  long speed = 0;
  // Virtual interfaces fail the read (EINVAL) or report -1; both mean "unknown".
  if (!(file >> speed) || speed <= 0) return std::nullopt;
  return speed;
}

// NCCL_SOCKET_IFNAME entries match name prefixes ("eth" matches eth0), or whole names after '='.
InterfaceChoice from_nccl_list(const std::string& value) {
  const bool exact = !value.empty() && value[0] == '=';
  const auto entries = split(exact ? value.substr(1) : value, ',');
  for (const Interface& interface : list_interfaces()) {
    for (const auto& entry : entries) {
      const std::string& name = interface.name;
      if (exact ? name == entry : name.rfind(entry, 0) == 0) return {name, vars::kNcclSocketIfname, ""};
    }
  }
  return {"", vars::kNcclSocketIfname,
          "no interface on this node matches NCCL_SOCKET_IFNAME=" + quote(value) + "; `ip -br link` lists them"};
}

}  // namespace

InterfaceInfo read_interface(const std::string& name, const std::string& sysfs_root) {
  InterfaceInfo info;
  info.name = name;
  const std::vector<Interface> interfaces = list_interfaces();
  const Interface* found = find_interface(interfaces, name);
  if (found == nullptr) return info;
  info.exists = true;
  info.up = found->switched_on;
  info.running = found->up;
  std::vector<IpAddress> usable;
  std::copy_if(found->addresses.begin(), found->addresses.end(), std::back_inserter(usable),
               [](const IpAddress& address) { return !is_link_local(address); });
  std::stable_partition(usable.begin(), usable.end(), [](const IpAddress& a) { return a.family == AF_INET; });
  for (const IpAddress& address : usable) info.addresses.push_back(to_string(address));
  info.speed_mbps = read_speed(sysfs_root, name);
  return info;
}

bool is_local_address(const std::string& numeric_address) {
  try {
    return holds_address(list_interfaces(), numeric_address);
  } catch (const std::exception&) {
    return false;
  }
}

InterfaceChoice choose_interface(const std::optional<std::string>& option, const EnvLookup& env,
                                 const std::string& master_ip) {
  if (option) return {*option, "--interface", ""};
  if (const auto gloo = split(env(vars::kGlooSocketIfname).value_or(""), ','); !gloo.empty()) {
    return {gloo.front(), vars::kGlooSocketIfname, ""};
  }
  if (const auto nccl = env(vars::kNcclSocketIfname); nccl && !nccl->empty() && (*nccl)[0] != '^') {
    return from_nccl_list(*nccl);
  }
  if (master_ip.empty()) return {"", "route to MASTER_ADDR", "MASTER_ADDR is unknown, so no route picks an interface"};
  try {
    return {route_to(list_interfaces(), master_ip), "route to MASTER_ADDR", ""};
  } catch (const Error& e) {
    return {"", "route to MASTER_ADDR", e.what()};
  }
}

CheckResult check_interface(const InterfaceChoice& choice, const InterfaceInfo& info) {
  const CheckInfo& check = checks::kInterface;
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
  const CheckInfo& check = checks::kLinkSpeed;
  if (!info.exists || !info.up) return skipped(check, "interface " + quote(info.name) + " is not usable");
  if (!info.speed_mbps) {
    return skipped(check,
                   info.name + " reports no link speed (a virtual interface); net.p2p_bw measures what it carries");
  }
  const double gbps = static_cast<double>(*info.speed_mbps) / 1000;
  const std::string threshold =
      ">= " + format_fixed(min_gbps, min_gbps == static_cast<long>(min_gbps) ? 0 : 1) + " Gbit/s";
  const Status status = grade_at_least(gbps, min_gbps, 0);
  return make_result(check, status, info.name + " " + std::to_string(*info.speed_mbps) + " Mb/s", threshold,
                     status == Status::Ok ? ""
                                          : "slower than distributed training needs between nodes; use a "
                                            "faster interface (--interface) or upgrade the link");
}

}  // namespace ddp::doctor
