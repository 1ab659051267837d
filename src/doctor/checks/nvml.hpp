#pragma once
// Driver and CUDA versions and GPU memory through NVML, loaded at run time: ddp-doctor has no link-time
// dependency on the NVIDIA driver and works on nodes without it.
#include <string>

#include "doctor/checks/gpu.hpp"

namespace ddp::doctor {

inline constexpr const char* kNvmlLibrary = "libnvidia-ml.so.1";

// Loads `library` with dlopen, reads the versions ("driver 550.54.15, CUDA 12.4") and per-GPU memory, and unloads
// it again.
DriverQuery query_nvml(const std::string& library = kNvmlLibrary);

}  // namespace ddp::doctor
