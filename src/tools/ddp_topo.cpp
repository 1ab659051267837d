// ddp-topo: the placement srun --ddp would give each task on this node (or on a node exported as hwloc XML),
// so an admin can check a new node type before users hit it.
#include <cstdio>
#include <exception>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/command_line.hpp"
#include "base/json_string.hpp"
#include "base/parse.hpp"
#include "base/resolve.hpp"
#include "core/error.hpp"
#include "core/netif.hpp"
#include "topology/binding.hpp"
#include "topology/id_list.hpp"
#include "topology/topology.hpp"

namespace {

constexpr const char* kUsageIntro =
    "usage: ddp-topo [--xml FILE] [--tasks N] [--gpus LIST [--constrain-devices]] [--cpus LIST | --cores LIST]\n"
    "                [--master ADDR] [--nic NAME] [--matrix] [--json]\n"
    "Prints the GPU, NIC, HCA and CPUs srun --ddp gives each task of a node, the rule that chose them, and what\n"
    "each task exports.\n";
constexpr const char* kUsageEnd =
    "Closeness: PIX one PCIe switch, PXB several switches, PHB one host bridge, NODE one NUMA node,\n"
    "PKG one package (NCCL: SYS), SYS across packages.\n";

struct CliOptions {
  std::optional<std::string> xml;
  std::optional<unsigned> tasks;
  std::optional<std::vector<unsigned>> gpus;
  bool constrain_devices = false;
  std::optional<std::vector<unsigned>> cpus;
  std::optional<std::vector<unsigned>> cores;
  std::optional<std::string> master;
  std::optional<std::string> nic;
  bool matrix = false;
  bool json = false;
  bool help = false;
};

using Value = const std::string&;

const ddp::cli::Table<CliOptions>& option_table() {
  static const ddp::cli::Table<CliOptions> table = {
      {"--xml", "FILE", "read an hwloc XML export (lstopo --of xml) instead of this machine ($HWLOC_XMLFILE too)",
       [](CliOptions& o, Value v) { o.xml = v; }},
      {"--tasks", "N", "tasks on the node (default: one per GPU, or 1 without GPUs)",
       [](CliOptions& o, Value v) { o.tasks = ddp::cli::whole<unsigned>(v, 1, 65536); }, nullptr, "4"},
      {"--gpus", "LIST",
       "GPUs Slurm gave the step, as SLURM_STEP_GPUS: /dev/nvidiaN numbers (AMD: ROCm SMI\n"
       "indices), e.g. 0-3",
       [](CliOptions& o, Value v) { o.gpus = ddp::parse_id_list(v, "--gpus"); }},
      {"--constrain-devices", "", "as under ConstrainDevices=yes: tasks see only those GPUs, numbered from 0",
       [](CliOptions& o, Value) { o.constrain_devices = true; }},
      {"--cpus", "LIST", "CPU ids the step may use, e.g. 0-11,48-59 (default: all)",
       [](CliOptions& o, Value v) { o.cpus = ddp::parse_id_list(v, "--cpus"); }},
      {"--cores", "LIST", "Slurm core ids the step got, as S_STEP_ALLOC_CORES, e.g. 0-5,24-29",
       [](CliOptions& o, Value v) { o.cores = ddp::parse_id_list(v, "--cores"); }},
      {"--master", "ADDR", "choose each task's NCCL/GLOO_SOCKET_IFNAME towards ADDR (this machine only)",
       [](CliOptions& o, Value v) { o.master = v; }},
      {"--nic", "NAME", "the socket interface --ddp-nic=NAME would force (this machine only)",
       [](CliOptions& o, Value v) { o.nic = v; }},
      {"--matrix", "", "also print the GPU/NIC/HCA closeness matrix, like nvidia-smi topo -m",
       [](CliOptions& o, Value) { o.matrix = true; }},
      {"--json", "", "print JSON instead of tables", [](CliOptions& o, Value) { o.json = true; }},
  };
  return table;
}

std::string usage() { return kUsageIntro + ddp::cli::options_text(option_table(), CliOptions{}) + kUsageEnd; }

CliOptions parse_options(int argc, char** argv) {
  CliOptions options;
  const auto found =
      ddp::cli::parse(option_table(), options, std::vector<std::string>(argv + 1, argv + argc), "ddp-topo");
  ddp::cli::refuse_positionals(found, "ddp-topo");
  options.help = found.help;
  if (options.cpus && options.cores) throw ddp::Error("--cpus and --cores both give the step's CPUs; use one");
  if (options.constrain_devices && !options.gpus) throw ddp::Error("--constrain-devices needs --gpus LIST");
  return options;
}

struct Report {
  ddp::NodeHardware hw;
  ddp::NodePlan plan;
  std::vector<std::optional<ddp::SocketInterface>> sockets;  // per task; only with --master or --nic
  std::vector<ddp::EnvPairs> env;                            // per task
};

ddp::PlanRequest plan_request(const CliOptions& options, const ddp::NodeHardware& hw) {
  ddp::PlanRequest request;
  if (options.gpus) request.gpus = {false, *options.gpus, options.constrain_devices};
  if (options.cpus) request.allowed_cpus = *options.cpus;
  if (options.cores) request.allowed_cpus = ddp::cpus_of_cores(hw, *options.cores);
  const size_t gpus = options.gpus ? options.gpus->size() : hw.gpus.size();
  request.tasks = options.tasks ? *options.tasks : static_cast<unsigned>(gpus > 0 ? gpus : 1);
  return request;
}

std::optional<ddp::NetworkView> network_view(const CliOptions& options, const ddp::NodeHardware& hw) {
  if (!options.master && !options.nic) return std::nullopt;
  if (!hw.this_system) {
    throw ddp::Error("--master and --nic look at this machine's interfaces, not at " + hw.source +
                     "; drop --xml (and HWLOC_XMLFILE) to use them");
  }
  if (options.master) return ddp::read_network(ddp::resolve_host(*options.master));
  ddp::NetworkView view;
  view.interfaces = ddp::list_interfaces();
  return view;
}

Report make_report(const CliOptions& options) {
  Report report;
  report.hw = ddp::load_node_hardware(options.xml);
  report.plan = ddp::plan_node(report.hw, plan_request(options, report.hw));
  const auto network = network_view(options, report.hw);
  for (unsigned r = 0; r < report.plan.tasks.size(); ++r) {
    const ddp::TaskPlacement& task = report.plan.tasks[r];
    std::optional<ddp::SocketInterface> socket;
    if (network) {
      const auto preferred = task.nic ? std::optional<std::string>(report.hw.nets[*task.nic].name) : std::nullopt;
      socket = ddp::choose_socket_interface(*network, preferred, options.nic, true);
    }
    report.env.push_back(ddp::binding_env(report.plan, r, socket ? socket->name : ""));
    report.sockets.push_back(socket);
  }
  return report;
}

// ---- text ------------------------------------------------------------------------------------------------

std::string or_dash(const std::optional<std::string>& text) { return text ? *text : "-"; }

std::optional<std::string> nic_name(const Report& report, const std::optional<ddp::DeviceIndex>& nic) {
  if (!nic) return std::nullopt;
  return report.hw.nets[*nic].name;
}

std::optional<std::string> hca_name(const Report& report, const std::optional<ddp::DeviceIndex>& hca) {
  if (!hca) return std::nullopt;
  return report.hw.rdma[*hca].name;
}

std::optional<std::string> closeness_name(const std::optional<ddp::Closeness>& closeness) {
  if (!closeness) return std::nullopt;
  return ddp::to_string(*closeness);
}

std::string env_text(const ddp::EnvPairs& env) {
  std::string text;
  for (const auto& [name, value] : env) text += (text.empty() ? "" : " ") + name + "=" + value;
  return text.empty() ? "(nothing)" : text;
}

void print_summary(const Report& report) {
  const ddp::NodeHardware& hw = report.hw;
  std::printf("%s: %u packages, %zu NUMA nodes, %zu cores, %u CPUs; %zu %s GPUs, %zu NICs, %zu RDMA devices\n",
              hw.source.c_str(), hw.packages, hw.numa_nodes.size(), hw.cores.size(), hw.pus, hw.gpus.size(),
              hw.gpu_vendor ? ddp::to_string(*hw.gpu_vendor) : "NVIDIA or AMD", hw.nets.size(), hw.rdma.size());
  if (!hw.unplanned_gpus.empty()) {
    std::string others;
    for (const std::string& bus_id : hw.unplanned_gpus) others += (others.empty() ? "" : " ") + bus_id;
    std::printf("not planned: the other vendor's GPUs %s\n", others.c_str());
  }
  std::printf("plan: %s\n\n", report.plan.rule.c_str());
}

// Left-aligned in `width` columns, and a space.
std::string cell(const std::string& text, size_t width) {
  return text + std::string(text.size() < width ? width - text.size() : 0, ' ') + " ";
}

void print_tasks(const Report& report) {
  const bool sockets = !report.sockets.empty() && report.sockets.front().has_value();
  std::printf("%s\n", (cell("TASK", 5) + cell("CUDA", 5) + cell("GPU", 4) + cell("PCI BUS ID", 13) + cell("NIC", 12) +
                       cell("CLASS", 5) + cell("HCA", 14) + cell("CLASS", 5) +
                       (sockets ? cell("SOCKET IFNAME", 26) : "") + "CPUS")
                          .c_str());
  for (size_t r = 0; r < report.plan.tasks.size(); ++r) {
    const ddp::TaskPlacement& task = report.plan.tasks[r];
    const auto& socket = report.sockets[r];
    std::string row =
        cell(std::to_string(r), 5) + cell(task.gpu ? std::to_string(task.cuda_index) : "-", 5) +
        cell(task.gpu ? std::to_string(*task.gpu) : "-", 4) +
        cell(task.gpu ? report.hw.gpus[*task.gpu].pci_bus_id : "-", 13) +
        cell(or_dash(nic_name(report, task.nic)), 12) + cell(or_dash(closeness_name(task.nic_closeness)), 5) +
        cell(or_dash(hca_name(report, task.hca)), 14) + cell(or_dash(closeness_name(task.hca_closeness)), 5);
    if (socket) row += cell(socket->name + " (" + ddp::to_string(socket->reason) + ")", 26);
    std::printf("%s%s\n", row.c_str(), ddp::format_id_list(task.cpus).c_str());
  }
  std::printf("\n");
  for (size_t r = 0; r < report.plan.tasks.size(); ++r) {
    const ddp::TaskPlacement& task = report.plan.tasks[r];
    if (task.gpu) std::printf("task %zu GPU:  %s\n", r, task.gpu_rule.c_str());
    std::printf("task %zu CPUs: %s\n", r, task.cpu_rule.c_str());
    if (!task.note.empty()) std::printf("task %zu note: %s\n", r, task.note.c_str());
  }
  std::printf("\n");
  for (size_t r = 0; r < report.env.size(); ++r)
    std::printf("task %zu exports: %s\n", r, env_text(report.env[r]).c_str());
}

void print_matrix(const ddp::NodeHardware& hw) {
  std::printf("\n%-8s", "");
  for (size_t g = 0; g < hw.gpus.size(); ++g) std::printf(" %-6s", ("GPU" + std::to_string(g)).c_str());
  for (const auto& net : hw.nets) std::printf(" %-12s", net.name.c_str());
  for (const auto& device : hw.rdma) std::printf(" %-12s", device.name.c_str());
  std::printf(" CPU AFFINITY\n");
  for (size_t g = 0; g < hw.gpus.size(); ++g) {
    const ddp::Gpu& gpu = hw.gpus[g];
    std::printf("%-8s", ("GPU" + std::to_string(g)).c_str());
    for (size_t o = 0; o < gpu.to_gpu.size(); ++o) std::printf(" %-6s", o == g ? "X" : ddp::to_string(gpu.to_gpu[o]));
    for (const auto closeness : gpu.to_net) std::printf(" %-12s", ddp::to_string(closeness));
    for (const auto closeness : gpu.to_rdma) std::printf(" %-12s", ddp::to_string(closeness));
    std::printf(" %s\n", ddp::format_id_list(hw.localities[gpu.locality].cpus).c_str());
  }
}

// ---- JSON ------------------------------------------------------------------------------------------------

using ddp::json_string;

std::string json_or_null(const std::optional<std::string>& text) { return text ? json_string(*text) : "null"; }

std::string json_hardware(const ddp::NodeHardware& hw) {
  std::string out =
      "\"source\":" + json_string(hw.source) + ",\"packages\":" + std::to_string(hw.packages) + ",\"gpu_vendor\":" +
      json_or_null(hw.gpu_vendor ? std::optional<std::string>(ddp::to_string(*hw.gpu_vendor)) : std::nullopt) +
      ",\"numa_nodes\":" + std::to_string(hw.numa_nodes.size()) + ",\"cores\":" + std::to_string(hw.cores.size()) +
      ",\"cpus\":" + std::to_string(hw.pus) + ",\"gpus\":[";
  for (size_t g = 0; g < hw.gpus.size(); ++g) {
    const ddp::Gpu& gpu = hw.gpus[g];
    out += std::string(g ? "," : "") + "{\"index\":" + std::to_string(g) +
           ",\"pci_bus_id\":" + json_string(gpu.pci_bus_id) + ",\"model\":" + json_string(gpu.model) +
           ",\"device_number\":" + std::to_string(gpu.device_number) +
           ",\"cpus\":" + json_string(ddp::format_id_list(hw.localities[gpu.locality].cpus)) + "}";
  }
  out += "],\"nics\":[";
  for (size_t n = 0; n < hw.nets.size(); ++n) {
    const auto& net = hw.nets[n];
    out += std::string(n ? "," : "") + "{\"name\":" + json_string(net.name) +
           ",\"pci_bus_id\":" + json_string(net.pci_bus_id) + ",\"ipoib_of\":" +
           json_or_null(net.rdma ? std::optional<std::string>(hw.rdma[*net.rdma].name) : std::nullopt) + "}";
  }
  out += "],\"rdma\":[";
  for (size_t d = 0; d < hw.rdma.size(); ++d) {
    out += std::string(d ? "," : "") + "{\"name\":" + json_string(hw.rdma[d].name) +
           ",\"pci_bus_id\":" + json_string(hw.rdma[d].pci_bus_id) +
           ",\"kind\":" + json_string(ddp::to_string(hw.rdma[d].kind)) + "}";
  }
  return out + "]";
}

std::string json_task(const Report& report, size_t r) {
  const ddp::TaskPlacement& task = report.plan.tasks[r];
  const bool gpu = task.gpu.has_value();
  std::string out =
      "{\"local_rank\":" + std::to_string(r) + ",\"gpu\":" + (gpu ? std::to_string(*task.gpu) : "null") +
      ",\"cuda_index\":" + (gpu ? std::to_string(task.cuda_index) : "null") + ",\"pci_bus_id\":" +
      json_or_null(gpu ? std::optional<std::string>(report.hw.gpus[*task.gpu].pci_bus_id) : std::nullopt) +
      ",\"nic\":" + json_or_null(nic_name(report, task.nic)) +
      ",\"nic_closeness\":" + json_or_null(closeness_name(task.nic_closeness)) +
      ",\"hca\":" + json_or_null(hca_name(report, task.hca)) +
      ",\"hca_closeness\":" + json_or_null(closeness_name(task.hca_closeness)) +
      ",\"cpus\":" + json_string(ddp::format_id_list(task.cpus)) +
      ",\"gpu_rule\":" + json_or_null(gpu ? std::optional<std::string>(task.gpu_rule) : std::nullopt) +
      ",\"cpu_rule\":" + json_string(task.cpu_rule) +
      ",\"note\":" + json_or_null(task.note.empty() ? std::nullopt : std::optional<std::string>(task.note));
  const auto& socket = report.sockets[r];
  out += ",\"socket_interface\":" + json_or_null(socket ? std::optional<std::string>(socket->name) : std::nullopt) +
         ",\"socket_reason\":" +
         json_or_null(socket ? std::optional<std::string>(ddp::to_string(socket->reason)) : std::nullopt) +
         ",\"env\":{";
  for (size_t i = 0; i < report.env[r].size(); ++i) {
    out += std::string(i ? "," : "") + json_string(report.env[r][i].first) + ":" + json_string(report.env[r][i].second);
  }
  return out + "}}";
}

void print_json(const Report& report) {
  std::string out = "{" + json_hardware(report.hw) + ",\"plan\":{\"rule\":" + json_string(report.plan.rule) +
                    ",\"visible_devices_variable\":" + json_string(report.plan.visible_devices_variable) +
                    ",\"visible_devices\":" + json_string(report.plan.visible_devices) + ",\"tasks\":[";
  for (size_t r = 0; r < report.plan.tasks.size(); ++r) out += std::string(r ? "," : "") + json_task(report, r);
  std::printf("%s]}}\n", out.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const CliOptions options = parse_options(argc, argv);
    if (options.help) {
      std::fputs(usage().c_str(), stdout);
      return 0;
    }
    const Report report = make_report(options);
    if (options.json) {
      print_json(report);
      return 0;
    }
    print_summary(report);
    print_tasks(report);
    if (options.matrix) print_matrix(report.hw);
    return 0;
  } catch (const ddp::Error& error) {
    std::fprintf(stderr, "ddp-topo: %s\n", error.what());
    return 2;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "ddp-topo: unexpected failure: %s\n", error.what());
    return 1;
  }
}
