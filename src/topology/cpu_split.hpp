#pragma once
// The CPU half of binding.hpp's plan, for plan_node: the step's CPUs as a mask over the topology, and each task's
// CPUs (TaskPlacement::cpus, cpu_rule) from the cores local to its GPU that Slurm gave the step. Internal to
// ddp_topology; no hwloc, only NodeHardware.
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "topology/binding.hpp"
#include "topology/numa_blocks.hpp"
#include "topology/topology.hpp"

namespace ddp::binding_detail {

// Per OS CPU id: the step may use it (`allowed`; nullopt: every CPU of the topology). Throws ddp::Error for a CPU
// that the topology lacks.
std::vector<bool> allowed_cpu_mask(const NodeHardware& hw, const std::optional<std::vector<unsigned>>& allowed);

// Shares the step's cores out among the node's tasks by binding.hpp's CPU rules.
class CpuSplitter {
 public:
  // `allowed`: allowed_cpu_mask(). Throws ddp::Error when none of the node's cores has an allowed CPU.
  CpuSplitter(const NodeHardware& hw, std::vector<bool> allowed);

  // Whether tasks on a GPU of this locality get CPUs local to it: Slurm gave the step one of its cores.
  bool is_local(size_t locality) const { return !local_step_cores(locality).empty(); }
  const std::vector<size_t>& step_cores() const { return step_cores_; }

  // locality_of_task: the GPU's Locality index per task, nullopt for a task without a GPU.
  void split(const std::vector<std::optional<size_t>>& locality_of_task, std::vector<TaskPlacement>& tasks);

 private:
  struct Group {
    std::vector<size_t> cores;  // candidate cores, in core order
    std::vector<size_t> tasks;
    std::string source;  // where the cores come from, for the rule
  };

  // Tasks with the same candidate cores share them. Localities are hwloc subtrees, so two groups' cores are
  // either disjoint or nested; narrow ones go first, so a socket's GPUs get their own socket's cores.
  std::vector<Group> group_tasks(const std::vector<std::optional<size_t>>& locality_of_task) const;

  // The cores group `g` may take: its tasks' share of the free cores of every group whose cores contain its
  // own, counting the tasks still to serve in there, so the tasks of an enclosing locality (a GPU local to
  // the whole machine beside GPUs local to sockets) keep their share.
  size_t quota(const std::vector<Group>& groups, const std::vector<bool>& served, size_t g) const;
  std::vector<unsigned> allowed_cpus_of(size_t core) const;
  std::vector<size_t> local_step_cores(size_t locality) const;
  // Whole cores by NUMA domain while there are enough, else CPUs of the cores, else shared CPUs.
  void share_out(const Group& group, size_t quota, std::vector<TaskPlacement>& tasks);
  static void append(std::vector<unsigned>& to, const std::vector<unsigned>& more);

  const NodeHardware& hw_;
  std::vector<bool> allowed_;
  NumaDomains numa_;
  std::vector<size_t> step_cores_;
  std::vector<bool> taken_;
};

// The OS CPU ids of `cores`, sorted.
std::vector<unsigned> cpus_of(const NodeHardware& hw, const std::vector<size_t>& cores);

}  // namespace ddp::binding_detail
