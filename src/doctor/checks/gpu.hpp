#pragma once
// GPUs as the PCI bus shows them (no driver needed), found by the enumeration the binding plan uses (gpus.hpp),
// against the ones a task may use (CUDA_VISIBLE_DEVICES or ROCR_VISIBLE_DEVICES), and what the vendor's management
// library (NVML, ROCm SMI; both loaded at run time) says of them.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "doctor/checks/check.hpp"
#include "topology/gpus.hpp"

namespace ddp::doctor {

struct NodeGpus {
  std::optional<GpuVendor> vendor;  // the vendor tasks are planned for (planned_vendor); nullopt: no GPU on the bus
  std::vector<GpuDevice> gpus;      // of that vendor, in its numbering
  // The variable that lists a task's GPUs: the vendor's, CUDA_VISIBLE_DEVICES on a node without GPUs.
  const char* visible_variable() const;
};

// The GPUs under `sysfs_root`/bus/pci/devices.
NodeGpus scan_gpus(const std::string& sysfs_root);

// What a task may use, read the way the CUDA runtime reads CUDA_VISIBLE_DEVICES (and ROCr its list).
struct VisibleGpus {
  bool all = false;                  // unset: every GPU of the node
  std::vector<std::string> entries;  // indices or GPU-/MIG- UUIDs, up to the first one CUDA would ignore
  std::string ignored;               // that entry and the rest, where CUDA stops reading
};
VisibleGpus parse_visible_devices(const std::optional<std::string>& visible_devices);

// gpu.visible: how many GPUs the task may use (`visible_devices`: the value of node.visible_variable()) against
// how many the node has. `needs_gpu`: the backend is NCCL (RCCL on AMD).
CheckResult check_visible_gpus(const NodeGpus& node, const std::optional<std::string>& visible_devices, bool needs_gpu);
// gpu.driver_bound: every GPU has its vendor's kernel driver (nvidia, amdgpu), not nouveau, vfio-pci or none.
CheckResult check_gpu_drivers(const NodeGpus& node);

// What a vendor's management library reported.
struct DriverGpu {
  std::string name;  // "NVIDIA H100 80GB HBM3", "AMD Instinct MI250X"
  uint64_t memory_total = 0;
  uint64_t memory_used = 0;
};
struct DriverReport {
  std::string versions;  // "driver 550.54.15, CUDA 12.4"
  std::vector<DriverGpu> gpus;
};
struct DriverQuery {
  std::optional<DriverReport> report;
  bool loaded = false;  // the library was found (its calls may still have failed: see error)
  std::string error;    // why report is missing
};

// gpu.driver: versions, and whether the library sees the GPUs the task should use (`usable`) of the `pci_gpus`
// on the bus. gpu.memory: memory already in use on a GPU before training starts. Without the library: a skip, except
// NVIDIA GPUs without NVML (a driver that is not installed), which fail.
std::vector<CheckResult> check_driver_report(const DriverQuery& query, GpuVendor vendor, size_t pci_gpus,
                                             size_t usable);

struct GpuLibraries {
  std::string nvml;                   // empty: nvml.hpp's default
  std::vector<std::string> rocm_smi;  // tried in order; empty: rocm_smi.hpp's defaults
};

// gpu.driver and gpu.memory through the node's vendor library: NVML for NVIDIA GPUs, ROCm SMI for AMD ones; on a
// node without GPUs on the bus, whichever loads (a skip when neither does).
std::vector<CheckResult> check_gpu_libraries(const NodeGpus& node, size_t usable, const GpuLibraries& libraries = {});

}  // namespace ddp::doctor
