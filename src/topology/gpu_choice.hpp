#pragma once
// binding.hpp's GPU rules, for plan_node: which of the node's GPUs the step may use, which GPU each task takes
// (with the rule that decided it), the visible-devices list in the task runtime's numbering, and the plan's one-line
// rule. Internal to ddp_topology; no hwloc, only NodeHardware.
#include <string>
#include <vector>

#include "topology/binding.hpp"
#include "topology/topology.hpp"

namespace ddp::binding_detail {

// The GPUs of `allocation` as indices into hw.gpus, in device order. Throws ddp::Error when SLURM_STEP_GPUS names
// a device number this node's driver does not have (gres.conf disagrees with the driver).
std::vector<DeviceIndex> usable_gpus(const NodeHardware& hw, const GpuAllocation& allocation);

struct GpuChoice {
  std::vector<DeviceIndex> visible;  // the tasks' device order
  std::vector<std::string> rules;    // per task
};

// Each task's GPU by binding.hpp's rules; `local` (per hw.gpus): the GPU's locality holds one of the step's cores.
// Empty when `usable` is.
GpuChoice choose_gpus(const NodeHardware& hw, const std::vector<DeviceIndex>& usable, unsigned tasks,
                      const std::vector<bool>& local);

// `visible` as the task's runtime counts GPUs: among `usable` when the cgroup hides the others, else node-wide.
std::string visible_devices(const std::vector<DeviceIndex>& visible, const std::vector<DeviceIndex>& usable,
                            bool cgroup_local);

// NodePlan::rule for `tasks` tasks on `usable` GPUs.
std::string rule_text(const NodeHardware& hw, size_t usable, unsigned tasks);

}  // namespace ddp::binding_detail
