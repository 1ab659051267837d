#pragma once
// binding.hpp's sharing of cores among tasks by NUMA domain, for the CPU split (cpu_split.hpp): each core's domain,
// and k tasks' blocks of whole cores out of a set of cores. Internal to ddp_topology; pure arithmetic on
// NodeHardware's cores and NUMA nodes.
#include <cstddef>
#include <string>
#include <vector>

#include "topology/topology.hpp"

namespace ddp::binding_detail {

// Each core's NUMA domain: the distinct CPU sets of NUMA nodes, in OS index order. Memory-only nodes share
// their CPUs' set (hwloc gives KNL's MCDRAM the cpuset of its quadrant) and so add no domain.
class NumaDomains {
 public:
  static constexpr size_t kNone = static_cast<size_t>(-1);

  explicit NumaDomains(const NodeHardware& hw);
  size_t of(size_t core) const { return domain_of_core_[core]; }
  // "NUMA node 1"; "no NUMA node" for kNone.
  std::string name(size_t domain) const;
  // name() of a single domain; "NUMA nodes 0,1" of several.
  std::string names(const std::vector<size_t>& domains) const;

 private:
  std::vector<size_t> domain_of_core_;
  std::vector<unsigned> names_;  // OS index of each domain's first NUMA node
};

struct CoreBlocks {
  std::vector<std::vector<size_t>> blocks;  // per task: cores
  std::vector<std::string> rules;           // per task
};

// Shares `cores` (in core order) out among k tasks as whole cores, by NUMA domain (binding.hpp's rules): k/D tasks
// per domain, D/k whole domains per task, or equal blocks crossing the fewest domain boundaries. Needs k <= n.
CoreBlocks split_by_domain(const std::vector<size_t>& cores, size_t k, const NumaDomains& numa);

}  // namespace ddp::binding_detail
