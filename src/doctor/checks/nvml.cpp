#include "doctor/checks/nvml.hpp"

#include "doctor/checks/driver_library.hpp"

namespace ddp::doctor {
namespace {

// The few NVML entry points used here, declared from NVML's stable C ABI (nvml.h is not installed with the
// toolkit on every node). Return codes are nvmlReturn_t, where 0 is NVML_SUCCESS.
using NvmlDevice = void*;
struct NvmlMemory {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
using InitFn = int (*)();
using ShutdownFn = int (*)();
using DriverVersionFn = int (*)(char*, unsigned);
using CudaVersionFn = int (*)(int*);
using CountFn = int (*)(unsigned*);
using HandleFn = int (*)(unsigned, NvmlDevice*);
using NameFn = int (*)(NvmlDevice, char*, unsigned);
using MemoryFn = int (*)(NvmlDevice, NvmlMemory*);
using ErrorStringFn = const char* (*)(int);

struct Api {
  InitFn init;
  ShutdownFn shutdown;
  DriverVersionFn driver_version;
  CudaVersionFn cuda_version;
  CountFn count;
  HandleFn handle;
  NameFn name;
  MemoryFn memory;
  ErrorStringFn error_string;
};

std::optional<Api> bind(const SharedLibrary& library) {
  Api api{};
  const bool complete =
      library.bind("nvmlInit_v2", api.init) && library.bind("nvmlShutdown", api.shutdown) &&
      library.bind("nvmlSystemGetDriverVersion", api.driver_version) &&
      library.bind("nvmlSystemGetCudaDriverVersion", api.cuda_version) &&
      library.bind("nvmlDeviceGetCount_v2", api.count) && library.bind("nvmlDeviceGetHandleByIndex_v2", api.handle) &&
      library.bind("nvmlDeviceGetName", api.name) && library.bind("nvmlDeviceGetMemoryInfo", api.memory) &&
      library.bind("nvmlErrorString", api.error_string);
  if (!complete) return std::nullopt;
  return api;
}

std::string failed(const Api& api, const char* call, int rc) { return std::string(call) + ": " + api.error_string(rc); }

std::string cuda_version_text(int version) {
  return std::to_string(version / 1000) + "." + std::to_string((version % 1000) / 10);
}

// Reads everything with NVML initialised; returns the error text of the first call that failed.
std::string read_report(const Api& api, DriverReport& report) {
  char driver[96] = {};
  if (const int rc = api.driver_version(driver, sizeof driver); rc != 0) {
    return failed(api, "nvmlSystemGetDriverVersion", rc);
  }
  int cuda = 0;
  if (const int rc = api.cuda_version(&cuda); rc != 0) return failed(api, "nvmlSystemGetCudaDriverVersion", rc);
  report.versions = "driver " + std::string(driver) + ", CUDA " + cuda_version_text(cuda);
  unsigned count = 0;
  if (const int rc = api.count(&count); rc != 0) return failed(api, "nvmlDeviceGetCount", rc);
  for (unsigned i = 0; i < count; ++i) {
    NvmlDevice device = nullptr;
    NvmlMemory memory{};
    char name[96] = {};
    if (const int rc = api.handle(i, &device); rc != 0) return failed(api, "nvmlDeviceGetHandleByIndex", rc);
    if (const int rc = api.name(device, name, sizeof name); rc != 0) return failed(api, "nvmlDeviceGetName", rc);
    if (const int rc = api.memory(device, &memory); rc != 0) return failed(api, "nvmlDeviceGetMemoryInfo", rc);
    report.gpus.push_back({name, memory.total, memory.used});
  }
  return "";
}

std::string read_initialised(const Api& api, DriverReport& report) {
  if (const int rc = api.init(); rc != 0) return failed(api, "nvmlInit", rc);
  std::string error = read_report(api, report);
  api.shutdown();
  return error;
}

}  // namespace

DriverQuery query_nvml(const std::string& library_path) {
  return query_driver_library<Api>(library_path, {"NVML", "the NVIDIA driver is not installed here", "driver too old"},
                                   bind, read_initialised);
}

}  // namespace ddp::doctor
