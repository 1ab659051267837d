// plan_node (binding.hpp) put together from its GPU half (gpu_choice.hpp) and CPU half (cpu_split.hpp); here each
// task's NIC and HCA, the variables a task exports, and the kernel's CPU masks that apply a binding.
#include "topology/binding.hpp"

#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

#include "core/env_names.hpp"
#include "core/error.hpp"
#include "topology/cpu_split.hpp"
#include "topology/gpu_choice.hpp"
#include "topology/id_list.hpp"

namespace ddp {
namespace {

constexpr unsigned kMaxTasks = 65536;  // far above any node; keeps a corrupt count from costing memory

// ---- NICs -----------------------------------------------------------------------------------------------

const NumaNode* numa_node_of(const NodeHardware& hw, unsigned cpu) {
  for (const NumaNode& node : hw.numa_nodes) {
    const auto& cpus = hw.localities[node.locality].cpus;
    if (std::binary_search(cpus.begin(), cpus.end(), cpu)) return &node;
  }
  return nullptr;
}

void place_devices(const NodeHardware& hw, TaskPlacement& task) {
  if (task.gpu) {
    const Gpu& gpu = hw.gpus[*task.gpu];
    task.nic = gpu.nic;
    if (gpu.nic) task.nic_closeness = gpu.to_net[*gpu.nic];
    task.hca = gpu.hca;
    if (gpu.hca) task.hca_closeness = gpu.to_rdma[*gpu.hca];
    for (DeviceIndex d = 0; d < hw.rdma.size(); ++d) {
      if (hw.rdma[d].kind == RdmaKind::Efa && gpu.to_rdma[d] <= Closeness::Phb) task.efa_device_rdma = true;
    }
    return;
  }
  if (const NumaNode* node = numa_node_of(hw, task.cpus.front())) {
    task.nic = node->nic;
    task.nic_closeness = node->nic_closeness;
    task.hca = node->hca;
    task.hca_closeness = node->hca_closeness;
  }
}

std::string ib_hca_list(const NodeHardware& hw) {
  std::string list;
  for (const RdmaDevice& device : hw.rdma) {
    if (device.kind == RdmaKind::InfiniBand || device.kind == RdmaKind::RoCE) {
      list += (list.empty() ? "=" : ",") + device.name;
    }
  }
  return list;
}

// ---- CPU masks of the kernel ---------------------------------------------------------------------------

struct CpuMask {
  explicit CpuMask(size_t cpus) : count(cpus), bytes(CPU_ALLOC_SIZE(cpus)), set(CPU_ALLOC(cpus), cpu_free) {
    if (!set) throw Error("no memory for a CPU mask of " + std::to_string(cpus) + " CPUs");
    CPU_ZERO_S(bytes, set.get());
  }
  static void cpu_free(cpu_set_t* set) { CPU_FREE(set); }
  size_t count;
  size_t bytes;
  std::unique_ptr<cpu_set_t, decltype(&cpu_free)> set;
};

CpuMask current_affinity(pid_t pid) {
  // The kernel refuses a mask smaller than its CPU count: grow until it fits, within a bound.
  for (size_t cpus = 1024; cpus <= size_t{kMaxListedId} + 1; cpus *= 2) {
    CpuMask mask(cpus);
    if (sched_getaffinity(pid, mask.bytes, mask.set.get()) == 0) return mask;
    if (errno != EINVAL) {
      throw Error("cannot read the CPU affinity of process " + std::to_string(pid) + ": " + std::strerror(errno));
    }
  }
  throw Error("cannot read the CPU affinity of process " + std::to_string(pid) + ": more than " +
              std::to_string(kMaxListedId + 1) + " CPUs");
}

std::vector<unsigned> mask_cpus(const CpuMask& mask) {
  std::vector<unsigned> cpus;
  for (size_t cpu = 0; cpu < mask.count; ++cpu) {
    if (CPU_ISSET_S(cpu, mask.bytes, mask.set.get())) cpus.push_back(static_cast<unsigned>(cpu));
  }
  return cpus;
}

}  // namespace

GpuAllocation gpu_allocation_from_slurm(const std::optional<std::string>& slurm_step_gpus,
                                        const std::optional<std::string>& visible_devices,
                                        const std::string& visible_devices_name) {
  GpuAllocation allocation;
  if (!slurm_step_gpus || slurm_step_gpus->empty() || *slurm_step_gpus == "NoDevFiles") return allocation;
  allocation.whole_node = false;
  allocation.device_numbers = parse_id_list(*slurm_step_gpus, "SLURM_STEP_GPUS");
  if (visible_devices && !visible_devices->empty()) {
    allocation.cgroup_local = parse_id_list(*visible_devices, visible_devices_name) != allocation.device_numbers;
  }
  return allocation;
}

NodePlan plan_node(const NodeHardware& hw, const PlanRequest& request) {
  if (request.tasks == 0 || request.tasks > kMaxTasks) {
    throw Error("task count " + std::to_string(request.tasks) + " is not from 1 to " + std::to_string(kMaxTasks));
  }
  NodePlan plan;
  const std::vector<DeviceIndex> usable = binding_detail::usable_gpus(hw, request.gpus);
  binding_detail::CpuSplitter splitter(hw, binding_detail::allowed_cpu_mask(hw, request.allowed_cpus));
  std::vector<bool> local(hw.gpus.size());
  for (DeviceIndex g = 0; g < hw.gpus.size(); ++g) local[g] = splitter.is_local(hw.gpus[g].locality);
  const binding_detail::GpuChoice choice = binding_detail::choose_gpus(hw, usable, request.tasks, local);
  plan.rule = binding_detail::rule_text(hw, usable.size(), request.tasks);
  plan.visible_gpus = choice.visible;
  if (!usable.empty()) plan.visible_devices_variable = visible_devices_variable(hw.gpus[usable.front()].vendor);
  plan.visible_devices = binding_detail::visible_devices(plan.visible_gpus, usable, request.gpus.cgroup_local);
  plan.nccl_ib_hca = ib_hca_list(hw);
  plan.efa = std::any_of(hw.rdma.begin(), hw.rdma.end(), [](const RdmaDevice& d) { return d.kind == RdmaKind::Efa; });

  plan.tasks.resize(request.tasks);
  std::vector<std::optional<size_t>> locality_of_task(request.tasks);
  for (unsigned r = 0; r < request.tasks && !plan.visible_gpus.empty(); ++r) {
    TaskPlacement& task = plan.tasks[r];
    task.cuda_index = static_cast<unsigned>(r % plan.visible_gpus.size());
    task.gpu = plan.visible_gpus[task.cuda_index];
    task.gpu_rule = choice.rules[r];
    const Gpu& gpu = hw.gpus[*task.gpu];
    locality_of_task[r] = gpu.locality;
    if (!local[*task.gpu]) {
      task.note = "GPU " + gpu.pci_bus_id + " is remote: it is local to CPUs " +
                  format_id_list(hw.localities[gpu.locality].cpus) + ", none of which the step may use (it has " +
                  format_id_list(binding_detail::cpus_of(hw, splitter.step_cores())) +
                  "), so the task runs on the step's CPUs and reaches its GPU across the CPU interconnect";
    }
  }
  splitter.split(locality_of_task, plan.tasks);
  for (TaskPlacement& task : plan.tasks) place_devices(hw, task);
  return plan;
}

std::vector<unsigned> cpus_of_cores(const NodeHardware& hw, const std::vector<unsigned>& core_ids) {
  std::vector<unsigned> cpus;
  for (unsigned core : core_ids) {
    if (core >= hw.cores.size()) {
      throw Error("Slurm's core " + std::to_string(core) + " is not in " + hw.source + ", which has cores 0-" +
                  std::to_string(hw.cores.size() - 1) + "; the node's topology and slurm.conf disagree");
    }
    cpus.insert(cpus.end(), hw.cores[core].begin(), hw.cores[core].end());
  }
  std::sort(cpus.begin(), cpus.end());
  return cpus;
}

EnvPairs binding_env(const NodePlan& plan, unsigned local_rank, const std::string& socket_interface) {
  if (local_rank >= plan.tasks.size()) {
    throw Error("local rank " + std::to_string(local_rank) + " is outside the node's plan of " +
                std::to_string(plan.tasks.size()) + " tasks");
  }
  EnvPairs env;
  if (plan.visible_devices_variable == "CUDA_VISIBLE_DEVICES") {
    env.emplace_back("CUDA_VISIBLE_DEVICES", plan.visible_devices);
    env.emplace_back("CUDA_DEVICE_ORDER", "PCI_BUS_ID");
  } else if (!plan.visible_devices_variable.empty()) {
    env.emplace_back(plan.visible_devices_variable, plan.visible_devices);
    std::string hip;
    for (size_t i = 0; i < plan.visible_gpus.size(); ++i) hip += (i ? "," : "") + std::to_string(i);
    env.emplace_back("HIP_VISIBLE_DEVICES", hip);
  }
  if (!socket_interface.empty()) {
    env.emplace_back(vars::kNcclSocketIfname, socket_interface);
    env.emplace_back(vars::kGlooSocketIfname, socket_interface);
  }
  if (!plan.nccl_ib_hca.empty()) env.emplace_back("NCCL_IB_HCA", plan.nccl_ib_hca);
  if (plan.efa) {
    env.emplace_back("FI_PROVIDER", "efa");
    env.emplace_back("FI_EFA_FORK_SAFE", "1");
    if (plan.tasks[local_rank].efa_device_rdma) env.emplace_back("FI_EFA_USE_DEVICE_RDMA", "1");
  }
  return env;
}

std::vector<unsigned> apply_cpu_binding(pid_t pid, const std::vector<unsigned>& cpus) {
  std::vector<unsigned> requested = cpus;
  std::sort(requested.begin(), requested.end());
  requested.erase(std::unique(requested.begin(), requested.end()), requested.end());
  const CpuMask allowed = current_affinity(pid);
  CpuMask wanted(allowed.count);
  std::vector<unsigned> bound;
  for (unsigned cpu : requested) {
    if (cpu < allowed.count && CPU_ISSET_S(cpu, allowed.bytes, allowed.set.get())) {
      CPU_SET_S(cpu, wanted.bytes, wanted.set.get());
      bound.push_back(cpu);
    }
  }
  if (bound.empty()) {
    throw Error("CPU binding: none of the task's CPUs " + format_id_list(requested) +
                " is among the CPUs it may use (" + format_id_list(mask_cpus(allowed)) +
                "); let Slurm give the step those cores, or use --ddp-bind=none");
  }
  if (sched_setaffinity(pid, wanted.bytes, wanted.set.get()) != 0) {
    throw Error("CPU binding to " + format_id_list(bound) + " failed: " + std::strerror(errno));
  }
  return bound;
}

}  // namespace ddp
