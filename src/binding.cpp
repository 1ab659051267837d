#include "binding.hpp"

#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>

#include "error.hpp"
#include "id_list.hpp"
#include "parse.hpp"

namespace ddp {
namespace {

constexpr unsigned kMaxTasks = 65536;  // far above any node; keeps a corrupt count from costing memory

// ---- GPUs -----------------------------------------------------------------------------------------------

std::vector<DeviceIndex> usable_gpus(const NodeHardware& hw, const GpuAllocation& allocation) {
  std::vector<DeviceIndex> usable;
  for (DeviceIndex g = 0; g < hw.gpus.size(); ++g) {
    const bool allocated =
        allocation.whole_node ||
        std::count(allocation.device_numbers.begin(), allocation.device_numbers.end(), hw.gpus[g].device_number) > 0;
    if (allocated) usable.push_back(g);
  }
  // Device numbers of other vendors' GPUs (an AMD node's gres) mean nothing here: a node without NVIDIA
  // GPUs gets a CPU plan. On an NVIDIA node a number without a GPU is a gres.conf that disagrees with the driver.
  if (!hw.gpus.empty() && !allocation.whole_node && usable.size() != allocation.device_numbers.size()) {
    std::vector<unsigned> present;
    for (const Gpu& gpu : hw.gpus) present.push_back(gpu.device_number);
    std::sort(present.begin(), present.end());
    throw Error("SLURM_STEP_GPUS names GPUs " + quote(format_id_list(allocation.device_numbers)) +
                ", but this node's NVIDIA GPUs are /dev/nvidia" + format_id_list(present) +
                "; make gres.conf File= match the driver's device numbers");
  }
  return usable;
}

// Splits `gpus` into groups of equal key, in order of first appearance, each in the order given.
template <typename Key>
std::vector<std::vector<DeviceIndex>> group_by(const std::vector<DeviceIndex>& gpus, Key&& key) {
  std::vector<std::vector<DeviceIndex>> groups;
  std::vector<decltype(key(gpus.front()))> keys;
  for (DeviceIndex g : gpus) {
    const auto found = std::find(keys.begin(), keys.end(), key(g));
    if (found == keys.end()) {
      keys.push_back(key(g));
      groups.push_back({g});
    } else {
      groups[static_cast<size_t>(found - keys.begin())].push_back(g);
    }
  }
  return groups;
}

// One from each group in turn: consecutive picks land in different groups for as long as possible.
std::vector<DeviceIndex> interleave(const std::vector<std::vector<DeviceIndex>>& groups) {
  size_t rounds = 0;
  for (const auto& group : groups) rounds = std::max(rounds, group.size());
  std::vector<DeviceIndex> order;
  for (size_t round = 0; round < rounds; ++round) {
    for (const auto& group : groups) {
      if (round < group.size()) order.push_back(group[round]);
    }
  }
  return order;
}

// Fewer tasks than GPUs: the first tasks' GPUs alternate between CPU localities (sockets), and within one
// between network devices (host bridges), so tasks get separate cores first and separate NICs next.
std::vector<DeviceIndex> spread_order(const NodeHardware& hw, const std::vector<DeviceIndex>& usable) {
  std::vector<std::vector<DeviceIndex>> by_locality =
      group_by(usable, [&](DeviceIndex g) { return hw.gpus[g].locality; });
  for (auto& gpus : by_locality) {
    gpus = interleave(group_by(gpus, [&](DeviceIndex g) { return std::make_pair(hw.gpus[g].hca, hw.gpus[g].nic); }));
  }
  return interleave(by_locality);
}

// The CUDA order shared by all tasks of the node: task r's GPU at position r (mod the count).
std::vector<DeviceIndex> visible_order(const NodeHardware& hw, const std::vector<DeviceIndex>& usable, unsigned tasks) {
  if (tasks >= usable.size()) return usable;
  std::vector<DeviceIndex> order = spread_order(hw, usable);
  order.resize(tasks);
  for (DeviceIndex g : usable) {
    if (std::find(order.begin(), order.end(), g) == order.end()) order.push_back(g);
  }
  return order;
}

std::string cuda_visible_devices(const std::vector<DeviceIndex>& visible, const std::vector<DeviceIndex>& usable,
                                 bool cgroup_local) {
  std::string text;
  for (DeviceIndex g : visible) {
    // In the cgroup the task's CUDA counts only the allocated GPUs, in bus order; else all of the node's.
    const size_t index =
        cgroup_local ? static_cast<size_t>(std::find(usable.begin(), usable.end(), g) - usable.begin()) : g;
    text += (text.empty() ? "" : ",") + std::to_string(index);
  }
  return text;
}

std::string rule_text(size_t gpus_on_node, size_t usable, unsigned tasks) {
  const std::string counts = std::to_string(tasks) + " tasks, " + std::to_string(usable) + " GPUs";
  if (usable == 0) {
    return gpus_on_node == 0 ? "no NVIDIA GPU on this node: CPU binding and a NIC per task"
                             : "no GPU for the step: CPU binding and a NIC per task";
  }
  if (tasks == usable) return counts + ": one GPU per task";
  if (tasks < usable) {
    return counts + ": one GPU per task, spread over sockets, then NICs; the other " + std::to_string(usable - tasks) +
           " stay visible";
  }
  return counts + ": tasks share GPUs round-robin, task r on cuda:(r mod " + std::to_string(usable) + ")";
}

// ---- CPUs -----------------------------------------------------------------------------------------------

std::vector<bool> allowed_cpu_mask(const NodeHardware& hw, const std::optional<std::vector<unsigned>>& allowed) {
  std::vector<bool> in_topology;
  for (const auto& core : hw.cores) {
    for (unsigned cpu : core) {
      if (cpu >= in_topology.size()) in_topology.resize(cpu + 1, false);
      in_topology[cpu] = true;
    }
  }
  if (!allowed) return in_topology;
  std::vector<bool> mask(in_topology.size(), false);
  for (unsigned cpu : *allowed) {
    if (cpu >= in_topology.size() || !in_topology[cpu]) {
      std::vector<unsigned> present;
      for (unsigned c = 0; c < in_topology.size(); ++c) {
        if (in_topology[c]) present.push_back(c);
      }
      throw Error("CPU " + std::to_string(cpu) + " of the step's CPUs is not in " + hw.source + " (its CPUs are " +
                  format_id_list(present) + "); give CPUs of this node's topology");
    }
    mask[cpu] = true;
  }
  return mask;
}

class CpuSplitter {
 public:
  CpuSplitter(const NodeHardware& hw, std::vector<bool> allowed) : hw_(hw), allowed_(std::move(allowed)) {
    for (size_t c = 0; c < hw_.cores.size(); ++c) {
      if (!allowed_cpus_of(c).empty()) step_cores_.push_back(c);
    }
    if (step_cores_.empty()) throw Error("the step has no CPU on this node to bind tasks to");
  }

  // locality_of_task: the GPU's Locality index per task, nullopt for a task without a GPU.
  std::vector<std::vector<unsigned>> split(const std::vector<std::optional<size_t>>& locality_of_task) {
    const std::vector<Group> groups = group_tasks(locality_of_task);
    std::vector<std::vector<unsigned>> cpus(locality_of_task.size());
    taken_.assign(hw_.cores.size(), false);
    std::vector<bool> served(groups.size(), false);
    for (size_t g = 0; g < groups.size(); ++g) {
      share_out(groups[g], quota(groups, served, g), cpus);
      served[g] = true;
    }
    for (auto& task_cpus : cpus) std::sort(task_cpus.begin(), task_cpus.end());
    return cpus;
  }

 private:
  struct Group {
    std::vector<size_t> cores;  // candidate cores, in core order
    std::vector<size_t> tasks;
  };

  // Tasks with the same candidate cores share them. Localities are hwloc subtrees, so two groups' cores are
  // either disjoint or nested; narrow ones go first, so a socket's GPUs get their own socket's cores.
  std::vector<Group> group_tasks(const std::vector<std::optional<size_t>>& locality_of_task) const {
    std::map<std::vector<size_t>, std::vector<size_t>> tasks_by_cores;
    for (size_t t = 0; t < locality_of_task.size(); ++t) {
      tasks_by_cores[candidate_cores(locality_of_task[t])].push_back(t);
    }
    std::vector<Group> groups;
    for (auto& [cores, tasks] : tasks_by_cores) groups.push_back({cores, tasks});
    std::sort(groups.begin(), groups.end(), [](const Group& a, const Group& b) {
      return std::make_pair(a.cores.size(), a.tasks.front()) < std::make_pair(b.cores.size(), b.tasks.front());
    });
    return groups;
  }

  // The cores group `g` may take: its tasks' share of the free cores of every group whose cores contain its
  // own, counting the tasks still to serve in there, so the tasks of an enclosing locality (a GPU local to
  // the whole machine beside GPUs local to sockets) keep their share.
  size_t quota(const std::vector<Group>& groups, const std::vector<bool>& served, size_t g) const {
    const auto inside = [&](const Group& outer, const Group& inner) {
      return std::includes(outer.cores.begin(), outer.cores.end(), inner.cores.begin(), inner.cores.end());
    };
    size_t quota = groups[g].cores.size();
    for (const Group& outer : groups) {
      if (!inside(outer, groups[g])) continue;
      const size_t free = static_cast<size_t>(
          std::count_if(outer.cores.begin(), outer.cores.end(), [&](size_t c) { return !taken_[c]; }));
      size_t waiting = 0;
      for (size_t m = 0; m < groups.size(); ++m) {
        if (!served[m] && inside(outer, groups[m])) waiting += groups[m].tasks.size();
      }
      quota = std::min(quota, free * groups[g].tasks.size() / waiting);
    }
    return quota;
  }

  std::vector<unsigned> allowed_cpus_of(size_t core) const {
    std::vector<unsigned> cpus;
    for (unsigned cpu : hw_.cores[core]) {
      if (cpu < allowed_.size() && allowed_[cpu]) cpus.push_back(cpu);
    }
    return cpus;
  }

  std::vector<size_t> candidate_cores(const std::optional<size_t>& locality) const {
    if (!locality) return step_cores_;
    std::vector<size_t> cores;
    for (size_t c : hw_.localities[*locality].cores) {
      if (std::binary_search(step_cores_.begin(), step_cores_.end(), c)) cores.push_back(c);
    }
    return cores.empty() ? step_cores_ : cores;
  }

  // Whole cores in contiguous blocks while there are enough, else CPUs of the cores, else shared CPUs.
  void share_out(const Group& group, size_t quota, std::vector<std::vector<unsigned>>& cpus) {
    const size_t k = group.tasks.size();
    std::vector<size_t> free;
    for (size_t c : group.cores) {
      if (!taken_[c] && free.size() < std::max(quota, k)) free.push_back(c);
    }
    // Only when quotas left nothing (fewer cores than tasks): share what the group has.
    if (free.empty()) free = group.cores;
    for (size_t c : free) taken_[c] = true;
    if (free.size() >= k) {
      for (size_t j = 0; j < k; ++j) {
        for (size_t i = j * free.size() / k; i < (j + 1) * free.size() / k; ++i) {
          append(cpus[group.tasks[j]], allowed_cpus_of(free[i]));
        }
      }
      return;
    }
    std::vector<unsigned> flat;
    for (size_t c : free) append(flat, allowed_cpus_of(c));
    for (size_t j = 0; j < k; ++j) {
      if (flat.size() >= k) {
        cpus[group.tasks[j]].assign(flat.begin() + static_cast<long>(j * flat.size() / k),
                                    flat.begin() + static_cast<long>((j + 1) * flat.size() / k));
      } else {
        cpus[group.tasks[j]] = {flat[j % flat.size()]};
      }
    }
  }

  static void append(std::vector<unsigned>& to, const std::vector<unsigned>& more) {
    to.insert(to.end(), more.begin(), more.end());
  }

  const NodeHardware& hw_;
  std::vector<bool> allowed_;
  std::vector<size_t> step_cores_;
  std::vector<bool> taken_;
};

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
                                        const std::optional<std::string>& cuda_visible_devices) {
  GpuAllocation allocation;
  if (!slurm_step_gpus || slurm_step_gpus->empty() || *slurm_step_gpus == "NoDevFiles") return allocation;
  allocation.whole_node = false;
  allocation.device_numbers = parse_id_list(*slurm_step_gpus, "SLURM_STEP_GPUS");
  if (cuda_visible_devices && !cuda_visible_devices->empty()) {
    allocation.cgroup_local = parse_id_list(*cuda_visible_devices, "CUDA_VISIBLE_DEVICES") != allocation.device_numbers;
  }
  return allocation;
}

NodePlan plan_node(const NodeHardware& hw, const PlanRequest& request) {
  if (request.tasks == 0 || request.tasks > kMaxTasks) {
    throw Error("task count " + std::to_string(request.tasks) + " is not from 1 to " + std::to_string(kMaxTasks));
  }
  NodePlan plan;
  const std::vector<DeviceIndex> usable = usable_gpus(hw, request.gpus);
  plan.rule = rule_text(hw.gpus.size(), usable.size(), request.tasks);
  plan.visible_gpus = visible_order(hw, usable, request.tasks);
  plan.cuda_visible_devices = cuda_visible_devices(plan.visible_gpus, usable, request.gpus.cgroup_local);
  plan.nccl_ib_hca = ib_hca_list(hw);
  plan.efa = std::any_of(hw.rdma.begin(), hw.rdma.end(), [](const RdmaDevice& d) { return d.kind == RdmaKind::Efa; });

  plan.tasks.resize(request.tasks);
  std::vector<std::optional<size_t>> locality_of_task(request.tasks);
  for (unsigned r = 0; r < request.tasks && !plan.visible_gpus.empty(); ++r) {
    TaskPlacement& task = plan.tasks[r];
    task.cuda_index = static_cast<unsigned>(r % plan.visible_gpus.size());
    task.gpu = plan.visible_gpus[task.cuda_index];
    locality_of_task[r] = hw.gpus[*task.gpu].locality;
  }
  CpuSplitter splitter(hw, allowed_cpu_mask(hw, request.allowed_cpus));
  std::vector<std::vector<unsigned>> cpus = splitter.split(locality_of_task);
  for (unsigned r = 0; r < request.tasks; ++r) {
    plan.tasks[r].cpus = std::move(cpus[r]);
    place_devices(hw, plan.tasks[r]);
  }
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
  if (!plan.cuda_visible_devices.empty()) {
    env.emplace_back("CUDA_VISIBLE_DEVICES", plan.cuda_visible_devices);
    env.emplace_back("CUDA_DEVICE_ORDER", "PCI_BUS_ID");
  }
  if (!socket_interface.empty()) {
    env.emplace_back("NCCL_SOCKET_IFNAME", socket_interface);
    env.emplace_back("GLOO_SOCKET_IFNAME", socket_interface);
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
