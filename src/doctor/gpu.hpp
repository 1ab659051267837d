#pragma once
// GPUs as the PCI bus shows them (no driver needed), against the ones a task may use (CUDA_VISIBLE_DEVICES).
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "doctor/check.hpp"

namespace ddp::doctor {

struct PciGpu {
  std::string bus_id;  // "0000:07:00.0"
  std::string driver;  // kernel driver bound to it ("nvidia", "nouveau", "vfio-pci"); empty: none
};

// NVIDIA display/3D controllers (vendor 0x10de, class 0x03xxxx) under `sysfs_root`/bus/pci/devices, by bus id.
std::vector<PciGpu> scan_nvidia_gpus(const std::string& sysfs_root);

// What a task may use, read the way the CUDA runtime reads CUDA_VISIBLE_DEVICES.
struct VisibleGpus {
  bool all = false;                  // unset: every GPU of the node
  std::vector<std::string> entries;  // indices or GPU-/MIG- UUIDs, up to the first one CUDA would ignore
  std::string ignored;               // that entry and the rest, where CUDA stops reading
};
VisibleGpus parse_visible_devices(const std::optional<std::string>& cuda_visible_devices);

// gpu.visible: how many GPUs the task may use against how many the node has. `needs_gpu`: the backend is NCCL.
CheckResult check_visible_gpus(size_t node_gpus, const std::optional<std::string>& cuda_visible_devices,
                               bool needs_gpu);
// gpu.driver_bound: every NVIDIA GPU has the nvidia kernel driver (not nouveau, vfio-pci or none).
CheckResult check_gpu_drivers(const std::vector<PciGpu>& gpus);

}  // namespace ddp::doctor
