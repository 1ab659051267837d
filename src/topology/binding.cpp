#include "topology/binding.hpp"

#include <sched.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <tuple>

#include "base/parse.hpp"
#include "core/env_names.hpp"
#include "core/error.hpp"
#include "topology/id_list.hpp"

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
  // A node without GPUs gets a CPU plan whatever gres says. On a GPU node a number without a GPU is a gres.conf
  // that disagrees with the driver.
  if (!hw.gpus.empty() && !allocation.whole_node && usable.size() != allocation.device_numbers.size()) {
    std::vector<unsigned> present;
    for (const Gpu& gpu : hw.gpus) present.push_back(gpu.device_number);
    std::sort(present.begin(), present.end());
    const GpuVendor vendor = hw.gpus.front().vendor;
    throw Error("SLURM_STEP_GPUS names GPUs " + quote(format_id_list(allocation.device_numbers)) +
                ", but this node's " + to_string(vendor) + " GPUs are " +
                (vendor == GpuVendor::Nvidia ? "/dev/nvidia" : "ROCm SMI devices ") + format_id_list(present) +
                "; make gres.conf File= match the driver's device numbers");
  }
  return usable;
}

bool shares(const std::optional<DeviceIndex>& a, const std::optional<DeviceIndex>& b) { return a && a == b; }

// Fewer tasks than GPUs: the picks of binding.hpp's rule, each with the key that decided it.
class GpuPicker {
 public:
  GpuPicker(const NodeHardware& hw, std::vector<DeviceIndex> candidates, std::vector<bool> local)
      : hw_(hw), left_(std::move(candidates)), local_(std::move(local)) {}

  std::vector<std::pair<DeviceIndex, std::string>> pick(size_t count) {
    std::vector<std::pair<DeviceIndex, std::string>> picks;
    while (picks.size() < count && !left_.empty()) {
      std::vector<Key> keys;
      for (DeviceIndex g : left_) keys.push_back(key(g));
      const size_t best = static_cast<size_t>(std::min_element(keys.begin(), keys.end()) - keys.begin());
      const DeviceIndex g = left_[best];
      picks.emplace_back(g, reason(keys, best));
      picked_.push_back(g);
      left_.erase(left_.begin() + static_cast<long>(best));
    }
    return picks;
  }

 private:
  // Smaller is better, compared in order: not local, picks in the package, picks in the locality, nearness of
  // the nearest pick's PCIe path, picks on the same NIC/HCA, device order (bus order for NVIDIA).
  using Key = std::tuple<bool, size_t, size_t, int, size_t, DeviceIndex>;
  static constexpr size_t kRules = 5;  // the keys before device order

  Key key(DeviceIndex g) const {
    const Gpu& gpu = hw_.gpus[g];
    size_t same_package = 0, same_locality = 0, same_nic = 0;
    Closeness nearest = Closeness::System;
    for (DeviceIndex p : picked_) {
      const Gpu& other = hw_.gpus[p];
      same_package += other.package == gpu.package;
      same_locality += other.locality == gpu.locality;
      same_nic += shares(other.nic, gpu.nic) + shares(other.hca, gpu.hca);
      nearest = std::min(nearest, gpu.to_gpu[p]);
    }
    return {!local_[g], same_package, same_locality, -static_cast<int>(nearest), same_nic, g};
  }

  static std::array<int64_t, kRules> rule_values(const Key& key) {
    return {std::get<0>(key), static_cast<int64_t>(std::get<1>(key)), static_cast<int64_t>(std::get<2>(key)),
            std::get<3>(key), static_cast<int64_t>(std::get<4>(key))};
  }

  // The keys that narrowed the field down to the pick: each one that left out a GPU still tied on the keys
  // before it; device order when GPUs were still tied after all of them. (Picks happen only with fewer tasks
  // than GPUs, so there are always at least two to choose from.)
  std::string reason(const std::vector<Key>& keys, size_t chosen) const {
    const auto mine = rule_values(keys[chosen]);
    std::vector<size_t> tied(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) tied[i] = i;
    std::string text;
    for (size_t rule = 0; rule < kRules; ++rule) {
      std::vector<size_t> still;
      for (size_t i : tied) {
        if (rule_values(keys[i])[rule] == mine[rule]) still.push_back(i);
      }
      if (still.size() < tied.size()) text += (text.empty() ? "" : ", ") + rule_name(rule, keys[chosen]);
      tied = std::move(still);
    }
    if (tied.size() > 1) text += text.empty() ? "first in device order" : ", then device order";
    return text;
  }

  static std::string rule_name(size_t rule, const Key& key) {
    switch (rule) {
      case 0: return "local to the step's CPUs";
      case 1: return "spread over sockets";
      case 2: return "spread over the socket's NUMA domains";
      case 3:
        return std::string("its own PCIe path (") + to_string(static_cast<Closeness>(-std::get<3>(key))) +
               " to the nearest earlier task's GPU)";
      default: return "its own NIC";
    }
  }

  const NodeHardware& hw_;
  std::vector<DeviceIndex> left_;
  std::vector<bool> local_;  // per NodeHardware::gpus
  std::vector<DeviceIndex> picked_;
};

struct GpuChoice {
  std::vector<DeviceIndex> visible;  // the tasks' device order
  std::vector<std::string> rules;    // per task
};

GpuChoice choose_gpus(const NodeHardware& hw, const std::vector<DeviceIndex>& usable, unsigned tasks,
                      const std::vector<bool>& local) {
  GpuChoice choice;
  if (usable.empty()) return choice;
  if (tasks >= usable.size()) {
    choice.visible = usable;
    for (unsigned r = 0; r < tasks; ++r) {
      choice.rules.push_back(tasks == usable.size() ? "one GPU per task, in device order"
                                                    : "GPUs shared round-robin (task r on GPU r mod " +
                                                          std::to_string(usable.size()) + ")");
    }
    return choice;
  }
  for (auto& [g, rule] : GpuPicker(hw, usable, local).pick(tasks)) {
    choice.visible.push_back(g);
    choice.rules.push_back(std::move(rule));
  }
  for (DeviceIndex g : usable) {
    if (std::find(choice.visible.begin(), choice.visible.end(), g) == choice.visible.end()) choice.visible.push_back(g);
  }
  return choice;
}

std::string visible_devices(const std::vector<DeviceIndex>& visible, const std::vector<DeviceIndex>& usable,
                            bool cgroup_local) {
  std::string text;
  for (DeviceIndex g : visible) {
    // In the cgroup the task's runtime counts only the allocated GPUs, in its own order; else all of the node's.
    const size_t index =
        cgroup_local ? static_cast<size_t>(std::find(usable.begin(), usable.end(), g) - usable.begin()) : g;
    text += (text.empty() ? "" : ",") + std::to_string(index);
  }
  return text;
}

std::string rule_text(const NodeHardware& hw, size_t usable, unsigned tasks) {
  const std::string counts = std::to_string(tasks) + " tasks, " + std::to_string(usable) + " GPUs";
  if (usable == 0) {
    return hw.gpus.empty() ? "no GPU on this node: CPU binding by NUMA domain and a NIC per task"
                           : "no GPU for the step: CPU binding by NUMA domain and a NIC per task";
  }
  if (tasks == usable) return counts + ": one GPU per task";
  if (tasks < usable) {
    return counts + ": one GPU per task, local to the step's CPUs first, spread over sockets and NUMA domains, " +
           "then PCIe paths, then NICs; the other " + std::to_string(usable - tasks) + " stay visible";
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

// Each core's NUMA domain: the distinct CPU sets of NUMA nodes, in OS index order. Memory-only nodes share
// their CPUs' set (hwloc gives KNL's MCDRAM the cpuset of its quadrant) and so add no domain.
class NumaDomains {
 public:
  static constexpr size_t kNone = static_cast<size_t>(-1);

  explicit NumaDomains(const NodeHardware& hw) : domain_of_core_(hw.cores.size(), kNone) {
    std::vector<size_t> seen;
    for (const NumaNode& node : hw.numa_nodes) {
      if (std::find(seen.begin(), seen.end(), node.locality) != seen.end()) continue;
      seen.push_back(node.locality);
      for (size_t core : hw.localities[node.locality].cores) {
        if (domain_of_core_[core] == kNone) domain_of_core_[core] = names_.size();
      }
      names_.push_back(node.os_index);
    }
  }
  size_t of(size_t core) const { return domain_of_core_[core]; }
  std::string name(size_t domain) const {
    return domain == kNone ? "no NUMA node" : "NUMA node " + std::to_string(names_[domain]);
  }
  std::string names(const std::vector<size_t>& domains) const {
    if (domains.size() == 1) return name(domains.front());
    std::string text = "NUMA nodes ";
    for (size_t i = 0; i < domains.size(); ++i) {
      text += (i ? "," : "") + (domains[i] == kNone ? std::string("none") : std::to_string(names_[domains[i]]));
    }
    return text;
  }

 private:
  std::vector<size_t> domain_of_core_;
  std::vector<unsigned> names_;  // OS index of each domain's first NUMA node
};

struct CoreBlocks {
  std::vector<std::vector<size_t>> blocks;  // per task: cores
  std::vector<std::string> rules;           // per task
};

// Contiguous blocks of `domain` (each core's domain, in core order) with sizes differing by at most one,
// crossing the fewest domain boundaries: a shortest path over (blocks placed, larger blocks among them),
// O(k * (n mod k)) steps, plain equal blocks beyond a bound. Returns the k + 1 block boundaries.
std::vector<size_t> fewest_crossings(const std::vector<size_t>& domain, size_t k) {
  const size_t n = domain.size(), small = n / k, large_count = n % k;
  std::vector<size_t> crossings_before(n, 0);  // domain changes in cores[0..i]
  for (size_t i = 1; i < n; ++i) crossings_before[i] = crossings_before[i - 1] + (domain[i] != domain[i - 1]);
  const auto cost = [&](size_t begin, size_t size) {
    return crossings_before[begin + size - 1] - crossings_before[begin];
  };
  constexpr size_t kFar = static_cast<size_t>(-1);
  constexpr size_t kMaxSteps = size_t{1} << 22;  // bounds the work per task on a node of thousands of cores
  const size_t width = large_count + 1;
  if ((k + 1) * width > kMaxSteps) {
    std::vector<size_t> starts;
    for (size_t t = 0; t <= k; ++t) starts.push_back(t * n / k);
    return starts;
  }
  std::vector<size_t> best(width * (k + 1), kFar);
  std::vector<bool> came_by_large(width * (k + 1), false);
  best[0] = 0;
  for (size_t placed = 0; placed < k; ++placed) {
    for (size_t large = 0; large <= std::min(placed, large_count); ++large) {
      const size_t here = best[placed * width + large];
      if (here == kFar) continue;
      const size_t begin = placed * small + large;
      for (const bool is_large : {false, true}) {
        const size_t next_large = large + is_large;
        if (next_large > large_count || placed + 1 - next_large > k - large_count) continue;
        const size_t total = here + cost(begin, small + is_large);
        size_t& slot = best[(placed + 1) * width + next_large];
        if (total < slot) {
          slot = total;
          came_by_large[(placed + 1) * width + next_large] = is_large;
        }
      }
    }
  }
  std::vector<size_t> sizes(k);
  for (size_t placed = k, large = large_count; placed > 0; --placed) {
    const bool is_large = came_by_large[placed * width + large];
    sizes[placed - 1] = small + is_large;
    large -= is_large;
  }
  std::vector<size_t> starts{0};
  for (size_t size : sizes) starts.push_back(starts.back() + size);
  return starts;
}

// Shares `cores` (in core order) out among k tasks as whole cores, by NUMA domain (binding.hpp). Needs k <= n.
CoreBlocks split_by_domain(const std::vector<size_t>& cores, size_t k, const NumaDomains& numa) {
  std::vector<size_t> domains;                    // in order of first appearance
  std::vector<std::vector<size_t>> domain_cores;  // beside domains
  for (size_t c : cores) {
    const auto found = std::find(domains.begin(), domains.end(), numa.of(c));
    if (found == domains.end()) {
      domains.push_back(numa.of(c));
      domain_cores.push_back({c});
    } else {
      domain_cores[static_cast<size_t>(found - domains.begin())].push_back(c);
    }
  }
  const size_t d = domains.size();
  CoreBlocks out;
  const auto fits = [&] {
    for (const auto& in_domain : domain_cores) {
      if (in_domain.size() < k / d) return false;
    }
    return true;
  };
  if (k % d == 0 && fits()) {
    for (size_t i = 0; i < d; ++i) {
      const size_t per = k / d, n = domain_cores[i].size();
      for (size_t j = 0; j < per; ++j) {
        out.blocks.emplace_back(domain_cores[i].begin() + static_cast<long>(j * n / per),
                                domain_cores[i].begin() + static_cast<long>((j + 1) * n / per));
        out.rules.push_back((domains[i] == NumaDomains::kNone ? "whole cores in " : "whole cores of ") +
                            numa.name(domains[i]) + (per > 1 ? ", split " + std::to_string(per) + " ways" : ""));
      }
    }
    return out;
  }
  if (d % k == 0) {
    for (size_t t = 0; t < k; ++t) {
      std::vector<size_t> block, names;
      for (size_t i = t * (d / k); i < (t + 1) * (d / k); ++i) {
        block.insert(block.end(), domain_cores[i].begin(), domain_cores[i].end());
        names.push_back(domains[i]);
      }
      out.blocks.push_back(std::move(block));
      out.rules.push_back("whole " + numa.names(names));
    }
    return out;
  }
  std::vector<size_t> ordered, domain_of;
  for (size_t i = 0; i < d; ++i) {
    ordered.insert(ordered.end(), domain_cores[i].begin(), domain_cores[i].end());
    domain_of.insert(domain_of.end(), domain_cores[i].size(), i);
  }
  const std::vector<size_t> starts = fewest_crossings(domain_of, k);
  for (size_t t = 0; t < k; ++t) {
    out.blocks.emplace_back(ordered.begin() + static_cast<long>(starts[t]),
                            ordered.begin() + static_cast<long>(starts[t + 1]));
    std::vector<size_t> names;
    for (size_t i = starts[t]; i < starts[t + 1]; ++i) {
      if (names.empty() || names.back() != domains[domain_of[i]]) names.push_back(domains[domain_of[i]]);
    }
    out.rules.push_back("an equal share of whole cores (" + std::to_string(k) + " tasks fit neither way on " +
                        std::to_string(d) + " NUMA domains; fewest boundaries crossed), " + numa.names(names));
  }
  return out;
}

class CpuSplitter {
 public:
  CpuSplitter(const NodeHardware& hw, std::vector<bool> allowed) : hw_(hw), allowed_(std::move(allowed)), numa_(hw) {
    for (size_t c = 0; c < hw_.cores.size(); ++c) {
      if (!allowed_cpus_of(c).empty()) step_cores_.push_back(c);
    }
    if (step_cores_.empty()) throw Error("the step has no CPU on this node to bind tasks to");
  }

  // Whether tasks on a GPU of this locality get CPUs local to it: Slurm gave the step one of its cores.
  bool is_local(size_t locality) const { return !local_step_cores(locality).empty(); }
  const std::vector<size_t>& step_cores() const { return step_cores_; }

  // locality_of_task: the GPU's Locality index per task, nullopt for a task without a GPU.
  void split(const std::vector<std::optional<size_t>>& locality_of_task, std::vector<TaskPlacement>& tasks) {
    const std::vector<Group> groups = group_tasks(locality_of_task);
    taken_.assign(hw_.cores.size(), false);
    std::vector<bool> served(groups.size(), false);
    for (size_t g = 0; g < groups.size(); ++g) {
      share_out(groups[g], quota(groups, served, g), tasks);
      served[g] = true;
    }
    for (TaskPlacement& task : tasks) std::sort(task.cpus.begin(), task.cpus.end());
  }

 private:
  struct Group {
    std::vector<size_t> cores;  // candidate cores, in core order
    std::vector<size_t> tasks;
    std::string source;  // where the cores come from, for the rule
  };

  // Tasks with the same candidate cores share them. Localities are hwloc subtrees, so two groups' cores are
  // either disjoint or nested; narrow ones go first, so a socket's GPUs get their own socket's cores.
  std::vector<Group> group_tasks(const std::vector<std::optional<size_t>>& locality_of_task) const {
    std::map<std::vector<size_t>, Group> by_cores;
    for (size_t t = 0; t < locality_of_task.size(); ++t) {
      const auto& locality = locality_of_task[t];
      std::vector<size_t> cores = locality ? local_step_cores(*locality) : std::vector<size_t>();
      const std::string source = !locality       ? "the step's cores"
                                 : cores.empty() ? "the step's cores (none local to "
                                                   "its GPU)"
                                                 : "cores local to its GPU";
      if (cores.empty()) cores = step_cores_;
      Group& group = by_cores[cores];
      group.cores = cores;
      if (group.source.empty()) group.source = source;
      group.tasks.push_back(t);
    }
    std::vector<Group> groups;
    for (auto& entry : by_cores) groups.push_back(std::move(entry.second));
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

  std::vector<size_t> local_step_cores(size_t locality) const {
    std::vector<size_t> cores;
    for (size_t c : hw_.localities[locality].cores) {
      if (std::binary_search(step_cores_.begin(), step_cores_.end(), c)) cores.push_back(c);
    }
    return cores;
  }

  // Whole cores by NUMA domain while there are enough, else CPUs of the cores, else shared CPUs.
  void share_out(const Group& group, size_t quota, std::vector<TaskPlacement>& tasks) {
    const size_t k = group.tasks.size();
    std::vector<size_t> free;
    for (size_t c : group.cores) {
      if (!taken_[c] && free.size() < std::max(quota, k)) free.push_back(c);
    }
    // Only when quotas left nothing (fewer cores than tasks): share what the group has.
    if (free.empty()) free = group.cores;
    for (size_t c : free) taken_[c] = true;
    if (free.size() >= k) {
      const CoreBlocks split = split_by_domain(free, k, numa_);
      for (size_t j = 0; j < k; ++j) {
        TaskPlacement& task = tasks[group.tasks[j]];
        for (size_t c : split.blocks[j]) append(task.cpus, allowed_cpus_of(c));
        task.cpu_rule = group.source + ": " + split.rules[j];
      }
      return;
    }
    std::vector<unsigned> flat;
    for (size_t c : free) append(flat, allowed_cpus_of(c));
    for (size_t j = 0; j < k; ++j) {
      TaskPlacement& task = tasks[group.tasks[j]];
      if (flat.size() >= k) {
        task.cpus.assign(flat.begin() + static_cast<long>(j * flat.size() / k),
                         flat.begin() + static_cast<long>((j + 1) * flat.size() / k));
        task.cpu_rule = group.source + ": CPUs of cores shared with other tasks (fewer cores than tasks)";
      } else {
        task.cpus = {flat[j % flat.size()]};
        task.cpu_rule = group.source + ": a CPU shared with other tasks (fewer CPUs than tasks)";
      }
    }
  }

  static void append(std::vector<unsigned>& to, const std::vector<unsigned>& more) {
    to.insert(to.end(), more.begin(), more.end());
  }

  const NodeHardware& hw_;
  std::vector<bool> allowed_;
  NumaDomains numa_;
  std::vector<size_t> step_cores_;
  std::vector<bool> taken_;
};

std::vector<unsigned> cpus_of(const NodeHardware& hw, const std::vector<size_t>& cores) {
  std::vector<unsigned> cpus;
  for (size_t c : cores) cpus.insert(cpus.end(), hw.cores[c].begin(), hw.cores[c].end());
  std::sort(cpus.begin(), cpus.end());
  return cpus;
}

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
  const std::vector<DeviceIndex> usable = usable_gpus(hw, request.gpus);
  CpuSplitter splitter(hw, allowed_cpu_mask(hw, request.allowed_cpus));
  std::vector<bool> local(hw.gpus.size());
  for (DeviceIndex g = 0; g < hw.gpus.size(); ++g) local[g] = splitter.is_local(hw.gpus[g].locality);
  const GpuChoice choice = choose_gpus(hw, usable, request.tasks, local);
  plan.rule = rule_text(hw, usable.size(), request.tasks);
  plan.visible_gpus = choice.visible;
  if (!usable.empty()) plan.visible_devices_variable = visible_devices_variable(hw.gpus[usable.front()].vendor);
  plan.visible_devices = visible_devices(plan.visible_gpus, usable, request.gpus.cgroup_local);
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
                  format_id_list(cpus_of(hw, splitter.step_cores())) +
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
