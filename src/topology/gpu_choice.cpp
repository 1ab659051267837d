// binding.hpp's GPU rules (gpu_choice.hpp): the step's usable GPUs, the picks for fewer tasks than GPUs, the
// visible-devices list and the plan's rule text.
#include "topology/gpu_choice.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <tuple>
#include <utility>

#include "base/parse.hpp"
#include "core/error.hpp"
#include "topology/id_list.hpp"

namespace ddp::binding_detail {
namespace {

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

}  // namespace

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

}  // namespace ddp::binding_detail
