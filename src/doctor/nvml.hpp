#pragma once
// Driver and CUDA versions and GPU memory through NVML, loaded at run time: ddp-doctor has no link-time
// dependency on the NVIDIA driver and works on nodes without it.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "doctor/check.hpp"
#include "doctor/gpu.hpp"

namespace ddp::doctor {

struct NvmlGpu {
  std::string name;  // "NVIDIA H100 80GB HBM3"
  uint64_t memory_total = 0;
  uint64_t memory_used = 0;
};

struct NvmlInfo {
  std::string driver_version;  // "550.54.15"
  int cuda_version = 0;        // the newest CUDA the driver supports, as 12040 for 12.4
  std::vector<NvmlGpu> gpus;
};

struct NvmlQuery {
  std::optional<NvmlInfo> info;
  bool loaded = false;  // the library was found
  std::string error;    // why info is missing: library not found, nvmlInit failed, ...
};

inline constexpr const char* kNvmlLibrary = "libnvidia-ml.so.1";

// Loads `library` with dlopen, reads versions and per-GPU memory, and unloads it again.
NvmlQuery query_nvml(const std::string& library = kNvmlLibrary);

// The query as gpu.hpp's checks take it, and those checks (check_driver_report) for NVIDIA GPUs.
DriverQuery driver_query(const NvmlQuery& query);
std::vector<CheckResult> check_nvml(const NvmlQuery& query, size_t pci_gpus, size_t usable);

// 12040 -> "12.4"
std::string cuda_version_text(int version);

}  // namespace ddp::doctor
