#pragma once
// The real-server hwloc exports in data/ (see data/README.md for what each holds), loaded once per test binary.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "topology/binding.hpp"
#include "topology/id_list.hpp"
#include "topology/topology.hpp"

namespace ddp::test {

inline std::string fixture_path(const std::string& file) { return std::string(DDP_TOPOLOGY_DATA) + "/" + file; }

inline const NodeHardware& fixture(const std::string& file) {
  static std::map<std::string, NodeHardware> loaded;
  auto found = loaded.find(file);
  if (found == loaded.end()) found = loaded.emplace(file, load_node_hardware(fixture_path(file))).first;
  return found->second;
}

inline const NodeHardware& p4d() { return fixture("aws-p4d.24xlarge.xml"); }
inline const NodeHardware& g4dn() { return fixture("aws-g4dn.metal.xml"); }
inline const NodeHardware& dgx2h() { return fixture("nvidia-dgx2h-16xV100.xml"); }
inline const NodeHardware& p100_node() { return fixture("intel-e5v4-2xP100-1xmlx5.xml"); }
inline const NodeHardware& threadripper() { return fixture("threadripper-nvidia+amd-gpu-hwloc1.xml"); }
inline const NodeHardware& mi50_node() { return fixture("amd-epyc-8xMI50-1xmlx5.xml"); }
// Synthetic (data/README.md): shapes no saved export has.
inline const NodeHardware& knl() { return fixture("synthetic-knl7250-snc4-flat.xml"); }
inline const NodeHardware& spr_snc4() { return fixture("synthetic-spr-snc4-8xH100-8xcx7.xml"); }

// Expected CPU sets are written the way lstopo and taskset print them.
inline std::vector<unsigned> ids(const std::string& list) { return parse_id_list(list, "test list"); }

// A plan request for `count` tasks, on the CPUs of the list `allowed_cpus` ("0-23,48-71") when given.
inline PlanRequest tasks(unsigned count, const std::optional<std::string>& allowed_cpus = std::nullopt) {
  PlanRequest request;
  request.tasks = count;
  if (allowed_cpus) request.allowed_cpus = ids(*allowed_cpus);
  return request;
}

// Each task's GPU as its PCI bus id, "-" for none.
inline std::vector<std::string> gpu_bus_ids(const NodeHardware& hw, const NodePlan& plan) {
  std::vector<std::string> out;
  for (const TaskPlacement& task : plan.tasks) out.push_back(task.gpu ? hw.gpus[*task.gpu].pci_bus_id : "-");
  return out;
}

// Each task's CPUs.
inline std::vector<std::vector<unsigned>> task_cpus(const NodePlan& plan) {
  std::vector<std::vector<unsigned>> out;
  for (const TaskPlacement& task : plan.tasks) out.push_back(task.cpus);
  return out;
}

}  // namespace ddp::test
