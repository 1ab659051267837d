#pragma once
// The amdgpu driver version and each AMD GPU's name and memory through ROCm SMI's library, loaded at run time like
// NVML (nvml.hpp): ddp-doctor has no link-time dependency on ROCm and works on nodes without it.
#include <string>
#include <vector>

#include "doctor/checks/gpu.hpp"

namespace ddp::doctor {

// Where the library is: Debian's librocm-smi64-1, then ROCm's own packages (on the loader path, or /opt/rocm).
std::vector<std::string> default_rocm_smi_libraries();

// Loads `library` with dlopen, reads the versions and per-GPU memory, and unloads it again.
DriverQuery query_rocm_smi(const std::string& library);

}  // namespace ddp::doctor
