// Cost of topology-aware binding as the plugin pays it: once per node, hwloc reads the topology and the network
// view is taken; then every task computes the node plan from that (it needs Slurm's per-task GPU variables),
// picks its socket interface and its environment, and binds itself. Goal for topology binding (and for its rules
// for fewer tasks than GPUs and NUMA-aligned CPU shares): under 1 ms per task after the per-node load.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/netif.hpp"
#include "timing.hpp"
#include "topology/binding.hpp"
#include "topology/topology.hpp"

namespace {

using ddp::bench::microseconds_per_call;

struct PerTask {
  double plan_us;
  double total_us;
};

// Everything one task does once the node's hardware and network view are known. The master here is this
// machine's loopback address of a single-node step, so the figure does not depend on the machine's networks.
PerTask per_task_cost(const ddp::NodeHardware& hw, const ddp::NetworkView& network, unsigned tasks, size_t& sink) {
  ddp::PlanRequest request;
  request.tasks = tasks;
  const double plan_us = microseconds_per_call(2000, [&](int) {
    request.gpus = ddp::gpu_allocation_from_slurm("0-7", "0-7");
    sink += ddp::plan_node(hw, request).tasks.size();
  });
  const double total_us = microseconds_per_call(2000, [&](int i) {
    request.gpus = ddp::gpu_allocation_from_slurm("0-7", "0-7");
    const ddp::NodePlan plan = ddp::plan_node(hw, request);
    const unsigned rank = static_cast<unsigned>(i) % tasks;
    const ddp::TaskPlacement& task = plan.tasks[rank];
    const auto preferred = task.nic ? std::optional<std::string>(hw.nets[*task.nic].name) : std::nullopt;
    const ddp::SocketInterface socket = ddp::choose_socket_interface(network, preferred, std::nullopt, false);
    sink += ddp::binding_env(plan, rank, socket.name).size() + task.cpus.size();
  });
  return {plan_us, total_us};
}

}  // namespace

int main(int argc, char** argv) {
  const std::string p4d = argc > 1 ? argv[1] : DDP_P4D_XML;
  size_t sink = 0;
  const double load_p4d_us = microseconds_per_call(50, [&](int) { sink += ddp::load_node_hardware(p4d).gpus.size(); });
  const double load_system_us = microseconds_per_call(20, [&](int) { sink += ddp::load_node_hardware().cores.size(); });
  // The plugin's probe without a cache: in a child without hwloc's environment variables, handed over as XML.
  const double load_this_system_us =
      microseconds_per_call(20, [&](int) { sink += ddp::load_this_system().cores.size(); });
  // What the plugin reads after the first step of a boot: the per-boot export (topology_cache.hpp).
  // A file of its own (mkstemp): a fixed name in /tmp could be a link another user planted.
  char exported_name[] = "/tmp/topology_bench.XXXXXX";
  const int exported_fd = mkstemp(exported_name);
  const std::string exported = exported_name;
  const std::string xml = ddp::system_topology_xml();
  if (exported_fd < 0 || write(exported_fd, xml.data(), xml.size()) != static_cast<ssize_t>(xml.size())) {
    std::perror("topology_bench: cannot write the export");
    return 1;
  }
  close(exported_fd);
  const double load_cached_us =
      microseconds_per_call(200, [&](int) { sink += ddp::load_system_hardware_from(exported).cores.size(); });
  unlink(exported.c_str());
  const double network_us =
      microseconds_per_call(200, [&](int) { sink += ddp::read_network("127.0.0.1").interfaces.size(); });
  const ddp::NodeHardware hw = ddp::load_node_hardware(p4d);
  const ddp::NetworkView network = ddp::read_network("127.0.0.1");
  const PerTask eight = per_task_cost(hw, network, 8, sink);
  const PerTask many = per_task_cost(hw, network, 96, sink);
  // The node-shape rules: GPU picks when tasks < GPUs (g4dn, 4 of 8), a step restricted to one socket, and CPU-only
  // shares by NUMA domain where the task count fits neither way (SPR SNC-4: 100 tasks on 8 domains of 14 cores).
  const std::string data = DDP_TOPOLOGY_DATA;
  const ddp::NodeHardware g4dn = ddp::load_node_hardware(data + "/aws-g4dn.metal.xml");
  const ddp::NodeHardware spr = ddp::load_node_hardware(data + "/synthetic-spr-snc4-8xH100-8xcx7.xml");
  const auto plan_us = [&](const ddp::NodeHardware& node, ddp::PlanRequest request) {
    return microseconds_per_call(2000, [&](int) { sink += ddp::plan_node(node, request).tasks.size(); });
  };
  ddp::PlanRequest picks;
  picks.tasks = 4;
  const double picks_us = plan_us(g4dn, picks);
  ddp::PlanRequest one_socket = picks;
  one_socket.allowed_cpus = ddp::cpus_of_cores(g4dn, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  const double one_socket_us = plan_us(g4dn, one_socket);
  ddp::PlanRequest cpu_only;
  cpu_only.tasks = 100;
  cpu_only.gpus.whole_node = false;
  const double numa_us = plan_us(spr, cpu_only);
  cpu_only.tasks = 96;
  const double numa96_us = plan_us(spr, cpu_only);
  std::vector<unsigned> own_cpus;
  for (const auto& core : ddp::load_node_hardware().cores) own_cpus.insert(own_cpus.end(), core.begin(), core.end());
  const double bind_us = microseconds_per_call(2000, [&](int) { sink += ddp::apply_cpu_binding(0, own_cpus).size(); });

  std::printf("topology_bench: per node: load p4d.24xlarge XML + inventory:      %9.1f us\n", load_p4d_us);
  std::printf("topology_bench: per node: load this system + inventory:           %9.1f us\n", load_system_us);
  std::printf(
      "topology_bench: per node: the same through a child (the plugin):  %9.1f us  (%.2fx the probe in place)\n",
      load_this_system_us, load_this_system_us / load_system_us);
  std::printf(
      "topology_bench: per node: load this system from its export:     %9.1f us  (the plugin's topology cache)\n",
      load_cached_us);
  std::printf("topology_bench: per node: network view (getifaddrs + route):      %9.1f us\n", network_us);
  std::printf("topology_bench: per task: p4d plan of 8 tasks:                    %9.1f us\n", eight.plan_us);
  std::printf(
      "topology_bench: per task: p4d plan + socket choice + env, 8 tasks:%9.1f us  (goal < 1000 us: %.0fx under)\n",
      eight.total_us, 1000.0 / eight.total_us);
  std::printf("topology_bench: per task: same with 96 tasks (GPUs shared):       %9.1f us  (goal < 1000 us)\n",
              many.total_us);
  std::printf("topology_bench: per task: g4dn plan, 4 tasks on 8 GPUs (picks):  %9.1f us\n", picks_us);
  std::printf("topology_bench: per task: same, step on socket 0's cores:         %9.1f us\n", one_socket_us);
  std::printf("topology_bench: per task: SPR SNC-4 CPU plan, 96 tasks (12/NUMA):%9.1f us\n", numa96_us);
  std::printf("topology_bench: per task: same, 100 tasks (fewest crossings):    %9.1f us\n", numa_us);
  std::printf("topology_bench: per task: sched_setaffinity within the mask:      %9.1f us\n", bind_us);
  std::printf("topology_bench: (checksum %zu)\n", sink);
  return 0;
}
