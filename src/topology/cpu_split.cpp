// The CPU half of binding.hpp's plan (cpu_split.hpp): the step's CPUs checked against the topology, tasks grouped
// by the cores local to their GPUs, and each group's share of cores handed out by NUMA domain (numa_blocks.hpp).
#include "topology/cpu_split.hpp"

#include <algorithm>
#include <map>
#include <utility>

#include "core/error.hpp"
#include "topology/id_list.hpp"

namespace ddp::binding_detail {

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

CpuSplitter::CpuSplitter(const NodeHardware& hw, std::vector<bool> allowed)
    : hw_(hw), allowed_(std::move(allowed)), numa_(hw) {
  for (size_t c = 0; c < hw_.cores.size(); ++c) {
    if (!allowed_cpus_of(c).empty()) step_cores_.push_back(c);
  }
  if (step_cores_.empty()) throw Error("the step has no CPU on this node to bind tasks to");
}

void CpuSplitter::split(const std::vector<std::optional<size_t>>& locality_of_task, std::vector<TaskPlacement>& tasks) {
  const std::vector<Group> groups = group_tasks(locality_of_task);
  taken_.assign(hw_.cores.size(), false);
  std::vector<bool> served(groups.size(), false);
  for (size_t g = 0; g < groups.size(); ++g) {
    share_out(groups[g], quota(groups, served, g), tasks);
    served[g] = true;
  }
  for (TaskPlacement& task : tasks) std::sort(task.cpus.begin(), task.cpus.end());
}

std::vector<CpuSplitter::Group> CpuSplitter::group_tasks(
    const std::vector<std::optional<size_t>>& locality_of_task) const {
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

size_t CpuSplitter::quota(const std::vector<Group>& groups, const std::vector<bool>& served, size_t g) const {
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

std::vector<unsigned> CpuSplitter::allowed_cpus_of(size_t core) const {
  std::vector<unsigned> cpus;
  for (unsigned cpu : hw_.cores[core]) {
    if (cpu < allowed_.size() && allowed_[cpu]) cpus.push_back(cpu);
  }
  return cpus;
}

std::vector<size_t> CpuSplitter::local_step_cores(size_t locality) const {
  std::vector<size_t> cores;
  for (size_t c : hw_.localities[locality].cores) {
    if (std::binary_search(step_cores_.begin(), step_cores_.end(), c)) cores.push_back(c);
  }
  return cores;
}

void CpuSplitter::share_out(const Group& group, size_t quota, std::vector<TaskPlacement>& tasks) {
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

void CpuSplitter::append(std::vector<unsigned>& to, const std::vector<unsigned>& more) {
  to.insert(to.end(), more.begin(), more.end());
}

std::vector<unsigned> cpus_of(const NodeHardware& hw, const std::vector<size_t>& cores) {
  std::vector<unsigned> cpus;
  for (size_t c : cores) cpus.insert(cpus.end(), hw.cores[c].begin(), hw.cores[c].end());
  std::sort(cpus.begin(), cpus.end());
  return cpus;
}

}  // namespace ddp::binding_detail
