#include "doctor/run/topology_check.hpp"

#include <algorithm>

#include "base/parse.hpp"
#include "core/env_names.hpp"
#include "topology/id_list.hpp"

namespace ddp::doctor {
namespace {

struct Nearest {
  std::string name;  // empty: the node has no PCI network device
  Closeness closeness = Closeness::System;
};

// Interfaces outside PCI (bridges, veths, lo) carry no traffic of their own and do not count.
Nearest nearest_network_device(const NodeHardware& hardware, const Gpu& gpu) {
  Nearest nearest;
  for (size_t i = 0; i < hardware.nets.size() && i < gpu.to_net.size(); ++i) {
    if (hardware.nets[i].pci_bus_id.empty()) continue;
    if (nearest.name.empty() || gpu.to_net[i] < nearest.closeness) nearest = {hardware.nets[i].name, gpu.to_net[i]};
  }
  for (size_t i = 0; i < hardware.rdma.size() && i < gpu.to_rdma.size(); ++i) {
    if (nearest.name.empty() || gpu.to_rdma[i] < nearest.closeness) nearest = {hardware.rdma[i].name, gpu.to_rdma[i]};
  }
  return nearest;
}

std::string task_line(const NodeHardware& hardware, const TaskPlacement& task, size_t local_rank) {
  std::string line = "task " + std::to_string(local_rank) + ":";
  if (task.gpu) line += " GPU " + hardware.gpus[*task.gpu].pci_bus_id;
  if (task.nic) {
    line += " NIC " + hardware.nets[*task.nic].name;
    if (task.nic_closeness) line += std::string(" (") + to_string(*task.nic_closeness) + ")";
  }
  return line + " CPUs " + format_id_list(task.cpus);
}

}  // namespace

CheckResult check_gpu_nic_closeness(const NodeHardware& hardware) {
  const CheckInfo& check = checks::kTopoGpuNic;
  if (hardware.gpus.empty()) return skipped(check, "no GPU in the topology");
  std::string across;
  size_t far = 0;
  Closeness worst = Closeness::Pix;
  for (const Gpu& gpu : hardware.gpus) {
    const Nearest nearest = nearest_network_device(hardware, gpu);
    if (nearest.name.empty()) return skipped(check, "no PCI network device in the topology");
    worst = std::max(worst, nearest.closeness);
    if (nearest.closeness != Closeness::System) continue;
    ++far;
    across += (across.empty() ? "" : ", ") + gpu.pci_bus_id + " (nearest " + nearest.name + ")";
  }
  const std::string threshold = "nearest NIC in the GPU's package";
  const std::string value =
      std::string("worst ") + to_string(worst) + " over " + std::to_string(hardware.gpus.size()) + " GPU(s)";
  if (far == 0) return make_result(check, Status::Ok, value, threshold);
  return make_result(check, Status::Warn, value, threshold,
                     std::to_string(far) + " GPU(s) have no NIC on their socket: " + across +
                         "; their ranks' traffic to other nodes crosses the socket interconnect (expect less "
                         "bandwidth there, or add a NIC to that socket)");
}

CheckResult describe_plan(const NodeHardware& hardware, const PlanRequest& request) {
  try {
    const NodePlan plan = plan_node(hardware, request);
    std::string detail;
    for (size_t rank = 0; rank < plan.tasks.size(); ++rank) {
      detail += (rank ? "; " : "") + task_line(hardware, plan.tasks[rank], rank);
    }
    return make_result(checks::kTopoPlan, Status::Ok, std::to_string(request.tasks) + " task(s): " + plan.rule, "",
                       detail);
  } catch (const std::exception& e) {
    return make_result(checks::kTopoPlan, Status::Warn, "no plan", "", e.what());
  }
}

std::vector<CheckResult> topology_checks(const EnvLookup& env) {
  NodeHardware hardware;
  try {
    hardware = load_node_hardware();
  } catch (const std::exception& e) {
    return {make_result(checks::kTopoPlan, Status::Warn, "no topology", "", e.what())};
  }
  PlanRequest request;
  if (const auto tasks = env(vars::kLocalWorldSize)) {
    request.tasks = static_cast<unsigned>(parse_uint(*tasks, 1u << 16).value_or(1));
  }
  try {
    // Only Slurm's own numbering: under srun --ddp the plugin has already rewritten CUDA_VISIBLE_DEVICES.
    request.gpus = gpu_allocation_from_slurm(env("SLURM_STEP_GPUS"), std::nullopt);
  } catch (const std::exception& e) {
    return {check_gpu_nic_closeness(hardware), make_result(checks::kTopoPlan, Status::Warn, "no plan", "", e.what())};
  }
  return {check_gpu_nic_closeness(hardware), describe_plan(hardware, request)};
}

}  // namespace ddp::doctor
