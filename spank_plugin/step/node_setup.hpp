#pragma once
// Placement of a --ddp step's tasks: what the plugin does once per node (read the topology and the network)
// and per task (plan lookup, socket interface, binding variables, optional node checks). It joins the task
// environment (task_env.hpp), the topology plan (binding.hpp, netif.hpp) and the doctor's node checks.
#include <optional>
#include <string>
#include <vector>

#include "core/netif.hpp"
#include "spank_plugin/step/task_env.hpp"
#include "topology/binding.hpp"
#include "topology/topology.hpp"

namespace ddp {

struct NodeSetup {
  std::optional<NodeHardware> hardware;               // with --ddp-bind=closest
  std::optional<std::vector<unsigned>> allowed_cpus;  // the step's cores as CPU ids; unset: no restriction known
  std::string allowed_cpus_note;                      // why allowed_cpus is unset, for --ddp-verbose
  NetworkView network;
};

// Once per node. `master_ip` is MASTER_ADDR resolved; `step_cores` is Slurm's S_STEP_ALLOC_CORES ("0-3,8").
// The topology is the admin's topology_xml, else the per-boot cache, else the running system (load_this_system):
// never a file the job or the process environment names (HWLOC_XMLFILE), since this runs inside slurmstepd.
// hwloc reads in a child process that must answer within `deadline`. Throws ddp::Error when the topology or the
// route to the master cannot be read.
NodeSetup setup_node(const StepPlan& plan, const std::string& master_ip, const std::string& step_cores,
                     std::chrono::milliseconds deadline = kTopologyDeadline);

// The topology cache directory to fill before privileges are dropped (topology_cache.hpp), when this step will
// read the running system's topology; nullopt otherwise.
std::optional<std::string> topology_cache_to_fill(const Options& options, const Config& config);

struct TaskBinding {
  std::vector<unsigned> cpus;  // to bind the task to; empty: leave Slurm's affinity as it is
  std::string summary;         // "gpu=... cpus=... socket=eth0 (route)", for --ddp-verbose
};

// Per task: adds CUDA_VISIBLE_DEVICES, *_SOCKET_IFNAME, NCCL_IB_HCA, FI_* to `env`. A value the user set wins,
// except CUDA_VISIBLE_DEVICES when Slurm's gres set it (SLURM_STEP_GPUS): that one is Slurm's, not the user's,
// and is replaced by the same GPUs in the plan's order. Throws ddp::Error (bad --ddp-nic, malformed GPU lists).
TaskBinding bind_task(const NodeSetup& node, const StepPlan& plan, const TaskInfo& task, TaskEnv& env);

struct CheckOutcome {
  std::string failures;  // one line, empty when no check failed
  std::string warnings;  // one line, empty when none
  size_t passed = 0;
};

// --ddp-check: the doctor's node checks (doctor/checks/node_checks.hpp) against the environment the task will get.
CheckOutcome check_node(const StepPlan& plan, const TaskEnv& env);

}  // namespace ddp
