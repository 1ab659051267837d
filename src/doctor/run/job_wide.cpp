#include "doctor/run/job_wide.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>

#include "base/port_range.hpp"
#include "core/env_names.hpp"

namespace ddp::doctor {
namespace {

namespace fs = std::filesystem;

constexpr size_t kMaxDevices = 16;
constexpr size_t kMaxPorts = 4;
constexpr int kMaxGidIndex = 16;
constexpr size_t kHostsNamed = 4;

// The first line of a sysfs file; nullopt when it cannot be read (an unpopulated GID's type reads as EINVAL).
std::optional<std::string> read_line(const fs::path& path) {
  std::ifstream file(path);
  std::string line;
  if (!file || !std::getline(file, line)) return std::nullopt;
  return line;
}

// The names in `dir`, sorted, at most `limit`.
std::vector<std::string> names_in(const fs::path& dir, size_t limit) {
  std::vector<std::string> names;
  std::error_code error;
  for (fs::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
    names.push_back(it->path().filename().string());
  }
  std::sort(names.begin(), names.end());
  if (names.size() > limit) names.resize(limit);
  return names;
}

// "4: ACTIVE" -> "ACTIVE".
std::string port_state(const fs::path& port) {
  const std::string state = read_line(port / "state").value_or("unknown");
  const size_t colon = state.find(": ");
  return colon == std::string::npos ? state : state.substr(colon + 2);
}

bool all_zero(const std::string& gid) { return gid.find_first_not_of("0:") == std::string::npos; }

// " gids 0:v1/ipv6 1:v2/ipv4": each populated index, its RoCE version and whether its address is an IPv4 one.
std::string roce_gids(const fs::path& port) {
  std::string out;
  for (int index = 0; index < kMaxGidIndex; ++index) {
    const auto gid = read_line(port / "gids" / std::to_string(index));
    const auto type = read_line(port / "gid_attrs" / "types" / std::to_string(index));
    if (!gid || !type || all_zero(*gid)) continue;
    const std::string version = type->find("v2") != std::string::npos ? "v2" : "v1";
    const bool ipv4 = gid->rfind("0000:0000:0000:0000:0000:ffff:", 0) == 0;
    out += " " + std::to_string(index) + ":" + version + (ipv4 ? "/ipv4" : "/ipv6");
  }
  return out.empty() ? "" : " gids" + out;
}

std::string shown(const std::string& value, const char* when_empty) { return value.empty() ? when_empty : value; }

std::string hosts_text(const std::vector<const NodeReport*>& nodes) {
  std::string text;
  for (size_t i = 0; i < nodes.size() && i < kHostsNamed; ++i) text += (i ? ", " : "") + nodes[i]->host;
  if (nodes.size() > kHostsNamed) text += " and " + std::to_string(nodes.size() - kHostsNamed) + " more";
  return text;
}

using Field = std::function<std::string(const NodeFacts&)>;

// The nodes by the value of `field`, in the order each value first appears; the value most nodes share first (on
// a tie, the first node's: rank 0's).
std::vector<std::pair<std::string, std::vector<const NodeReport*>>> group_by(const std::vector<NodeReport>& nodes,
                                                                             const Field& field) {
  std::vector<std::pair<std::string, std::vector<const NodeReport*>>> groups;
  for (const auto& node : nodes) {
    const std::string value = field(node.facts);
    auto group = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == value; });
    if (group == groups.end())
      groups.push_back({value, {&node}});
    else
      group->second.push_back(&node);
  }
  std::stable_sort(groups.begin(), groups.end(),
                   [](const auto& a, const auto& b) { return a.second.size() > b.second.size(); });
  return groups;
}

// OK when every node has the same value, else `on_difference` naming the odd nodes, what they have and `fix`.
CheckResult same_on_every_node(const CheckInfo& check, const std::vector<NodeReport>& nodes, const Field& field,
                               const char* when_empty, Status on_difference, const std::string& fix) {
  const auto groups = group_by(nodes, field);
  const std::string& common = groups.front().first;
  if (groups.size() == 1) {
    return make_result(check, Status::Ok, shown(common, when_empty), "the same on every node",
                       "on all " + std::to_string(nodes.size()) + " nodes");
  }
  std::vector<const NodeReport*> odd;
  std::string detail;
  for (size_t g = 1; g < groups.size(); ++g) {
    odd.insert(odd.end(), groups[g].second.begin(), groups[g].second.end());
    detail += hosts_text(groups[g].second) + " " + (groups[g].second.size() == 1 ? "has" : "have") + " '" +
              shown(groups[g].first, when_empty) + "'; ";
  }
  detail += hosts_text(groups.front().second) + " " + (groups.front().second.size() == 1 ? "has" : "have") + " '" +
            shown(common, when_empty) + "': " + fix;
  return make_result(check, on_difference, "differs on " + hosts_text(odd), "the same on every node", detail);
}

CheckResult port_range_check(const std::vector<NodeReport>& nodes, uint16_t master_port) {
  if (master_port == 0) return skipped(checks::kJobPortRange, "MASTER_PORT is unknown");
  const std::string port = std::to_string(master_port);
  std::vector<const NodeReport*> inside;
  std::vector<const NodeReport*> unreadable;
  for (const auto& node : nodes) {
    try {
      if (parse_port_range(node.facts.ephemeral, "ephemeral range").contains(master_port)) inside.push_back(&node);
    } catch (const std::exception&) {
      unreadable.push_back(&node);
    }
  }
  const auto ranges = [&](const std::vector<const NodeReport*>& of) {
    std::string text;
    for (const NodeReport* node : of) text += (text.empty() ? "" : ", ") + node->host + " " + node->facts.ephemeral;
    return text;
  };
  if (!inside.empty()) {
    return make_result(checks::kJobPortRange, Status::Fail, "inside on " + hosts_text(inside),
                       "outside every node's ephemeral range",
                       "MASTER_PORT " + port + " is inside net.ipv4.ip_local_port_range on " + ranges(inside) +
                           ": a connection from there may take the port first, and srun --ddp refuses a port_range "
                           "that overlaps a node's range; make the range the same on every node (sysctl "
                           "net.ipv4.ip_local_port_range) or choose port_range in plugstack.conf outside it");
  }
  if (unreadable.size() == nodes.size()) {
    return skipped(checks::kJobPortRange, "no node could read " + std::string(kEphemeralRangePath));
  }
  std::string detail = "MASTER_PORT " + port + " is outside every node's ephemeral range";
  if (!unreadable.empty()) detail += " (" + hosts_text(unreadable) + ": unreadable)";
  return make_result(checks::kJobPortRange, Status::Ok, "outside", "outside every node's ephemeral range", detail);
}

}  // namespace

std::string describe_rdma_ports(const std::string& sysfs_root) {
  const fs::path devices = fs::path(sysfs_root) / "class" / "infiniband";
  std::string out;
  for (const std::string& device : names_in(devices, kMaxDevices)) {
    for (const std::string& number : names_in(devices / device / "ports", kMaxPorts)) {
      const fs::path port = devices / device / "ports" / number;
      const std::string link_layer = read_line(port / "link_layer").value_or("unknown");
      out += (out.empty() ? "" : ", ") + device + "/" + number + " " + link_layer + " " + port_state(port);
      if (link_layer == "Ethernet") out += roce_gids(port);
    }
  }
  return out.empty() ? "none" : out;
}

NodeFacts read_node_facts(const NodeNetwork& network, const EnvLookup& env, const std::string& sysfs_root,
                          const std::string& ephemeral_path) {
  NodeFacts facts;
  facts.rdma_ports = describe_rdma_ports(sysfs_root);
  facts.nccl_ib_hca = env ? env(vars::kNcclIbHca).value_or("") : "";
  if (!network.info.addresses.empty()) facts.interface = network.choice.name;
  facts.master_ip = network.master_ip;
  try {
    facts.ephemeral = read_ephemeral_range(ephemeral_path).text();
  } catch (const std::exception&) {
    facts.ephemeral.clear();
  }
  return facts;
}

std::vector<CheckResult> compare_nodes(const std::vector<NodeReport>& nodes, uint16_t master_port) {
  const std::vector<const CheckInfo*> all{&checks::kJobRdma, &checks::kJobNcclIbHca, &checks::kJobInterface,
                                          &checks::kJobMasterAddr, &checks::kJobPortRange};
  std::vector<CheckResult> results;
  if (nodes.size() < 2) {
    for (const CheckInfo* check : all) results.push_back(skipped(*check, "one node: nothing to compare"));
    return results;
  }
  results.push_back(same_on_every_node(
      checks::kJobRdma, nodes, [](const NodeFacts& f) { return f.rdma_ports; }, "none", Status::Fail,
      "NCCL hangs without an error when the nodes' RDMA ports differ; bring the odd ports up or fix their link "
      "layer (ibstat, ibv_devinfo), or set NCCL_IB_HCA to the ports every node has"));
  results.push_back(same_on_every_node(
      checks::kJobNcclIbHca, nodes, [](const NodeFacts& f) { return f.nccl_ib_hca; }, "unset", Status::Fail,
      "NCCL needs the same NCCL_IB_HCA on every rank; set it once for the job (in the job script, or with "
      "sbatch --export), not per node"));
  results.push_back(same_on_every_node(
      checks::kJobInterface, nodes, [](const NodeFacts& f) { return f.interface; }, "none", Status::Warn,
      "srun --ddp sets GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME per node, but one GLOO_SOCKET_IFNAME exported for "
      "the whole job (torchrun, mpirun) names one interface for every node; leave it to srun --ddp, or give "
      "NCCL_SOCKET_IFNAME prefixes that match every node's interface"));
  results.push_back(same_on_every_node(
      checks::kJobMasterAddr, nodes, [](const NodeFacts& f) { return f.master_ip; }, "does not resolve", Status::Fail,
      "the ranks meet at MASTER_ADDR; make the odd nodes resolve it as the others do (DNS, /etc/hosts), or set "
      "MASTER_ADDR to rank 0's numeric address"));
  results.push_back(port_range_check(nodes, master_port));
  return results;
}

}  // namespace ddp::doctor
