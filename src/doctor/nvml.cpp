#include "doctor/nvml.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <memory>

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

constexpr double kUsedMemoryWarnFraction = 0.10;

struct Library {
  explicit Library(const std::string& path) : handle(dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) {}
  ~Library() {
    if (handle != nullptr) dlclose(handle);
  }
  template <typename Fn>
  Fn symbol(const char* name) const {
    return reinterpret_cast<Fn>(dlsym(handle, name));
  }
  void* handle;
};

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

std::optional<Api> bind(const Library& library) {
  Api api{library.symbol<InitFn>("nvmlInit_v2"),
          library.symbol<ShutdownFn>("nvmlShutdown"),
          library.symbol<DriverVersionFn>("nvmlSystemGetDriverVersion"),
          library.symbol<CudaVersionFn>("nvmlSystemGetCudaDriverVersion"),
          library.symbol<CountFn>("nvmlDeviceGetCount_v2"),
          library.symbol<HandleFn>("nvmlDeviceGetHandleByIndex_v2"),
          library.symbol<NameFn>("nvmlDeviceGetName"),
          library.symbol<MemoryFn>("nvmlDeviceGetMemoryInfo"),
          library.symbol<ErrorStringFn>("nvmlErrorString")};
  if (!api.init || !api.shutdown || !api.driver_version || !api.cuda_version || !api.count || !api.handle ||
      !api.name || !api.memory || !api.error_string) {
    return std::nullopt;
  }
  return api;
}

std::string failed(const Api& api, const char* call, int rc) { return std::string(call) + ": " + api.error_string(rc); }

// Reads everything with NVML initialised; returns the error text of the first call that failed.
std::string read_info(const Api& api, NvmlInfo& info) {
  char text[96] = {};
  if (const int rc = api.driver_version(text, sizeof text); rc != 0) return failed(api, "nvmlSystemGetDriverVersion", rc);
  info.driver_version = text;
  if (const int rc = api.cuda_version(&info.cuda_version); rc != 0) {
    return failed(api, "nvmlSystemGetCudaDriverVersion", rc);
  }
  unsigned count = 0;
  if (const int rc = api.count(&count); rc != 0) return failed(api, "nvmlDeviceGetCount", rc);
  for (unsigned i = 0; i < count; ++i) {
    NvmlDevice device = nullptr;
    NvmlMemory memory{};
    char name[96] = {};
    if (const int rc = api.handle(i, &device); rc != 0) return failed(api, "nvmlDeviceGetHandleByIndex", rc);
    if (const int rc = api.name(device, name, sizeof name); rc != 0) return failed(api, "nvmlDeviceGetName", rc);
    if (const int rc = api.memory(device, &memory); rc != 0) return failed(api, "nvmlDeviceGetMemoryInfo", rc);
    info.gpus.push_back({name, memory.total, memory.used});
  }
  return "";
}

CheckResult driver_result(const NvmlInfo& info, size_t pci_gpus, size_t usable) {
  std::string value = "driver " + info.driver_version + ", CUDA " + cuda_version_text(info.cuda_version) + ", " +
                      std::to_string(info.gpus.size()) + " GPU(s)";
  if (!info.gpus.empty()) value += " " + info.gpus.front().name;
  const std::string threshold = "sees >= " + std::to_string(usable) + " usable GPU(s)";
  // Under Slurm's ConstrainDevices the driver sees only the job's GPUs, so fewer than on the bus is normal;
  // fewer than the task should use is not.
  if (info.gpus.size() < usable) {
    return make_result("gpu.driver", Status::Fail, value, threshold,
                       "the driver sees " + std::to_string(info.gpus.size()) + " of the " + std::to_string(pci_gpus) +
                           " GPUs on the PCI bus: a GPU fell off the bus or failed to start; check dmesg for Xid "
                           "errors and nvidia-smi, then drain the node");
  }
  return make_result("gpu.driver", Status::Ok, value, threshold);
}

CheckResult memory_result(const NvmlInfo& info) {
  std::string busy;
  uint64_t most_used = 0;
  for (size_t i = 0; i < info.gpus.size(); ++i) {
    const auto& gpu = info.gpus[i];
    most_used = std::max<uint64_t>(most_used, gpu.memory_used);
    if (gpu.memory_total > 0 && gpu.memory_used > kUsedMemoryWarnFraction * static_cast<double>(gpu.memory_total)) {
      busy += (busy.empty() ? "" : ", ") + std::string("GPU ") + std::to_string(i) + " " +
              format_bytes(gpu.memory_used) + " of " + format_bytes(gpu.memory_total);
    }
  }
  const std::string value = "most used " + format_bytes(most_used);
  const std::string threshold = "<= " + format_fixed(kUsedMemoryWarnFraction * 100, 0) + "% in use";
  if (busy.empty()) return make_result("gpu.memory", Status::Ok, value, threshold);
  return make_result("gpu.memory", Status::Warn, value, threshold,
                     "already in use before training: " + busy +
                         "; another job or a leftover process holds it (nvidia-smi lists the processes)");
}

}  // namespace

NvmlQuery query_nvml(const std::string& library_path) {
  NvmlQuery query;
  const Library library(library_path);
  if (library.handle == nullptr) {
    query.error = "cannot load " + library_path + " (the NVIDIA driver is not installed here)";
    return query;
  }
  const auto api = bind(library);
  if (!api) {
    query.error = library_path + " lacks NVML entry points this tool uses (driver too old)";
    return query;
  }
  if (const int rc = api->init(); rc != 0) {
    query.error = failed(*api, "nvmlInit", rc);
    return query;
  }
  NvmlInfo info;
  query.error = read_info(*api, info);
  api->shutdown();
  if (query.error.empty()) query.info = std::move(info);
  return query;
}

std::vector<CheckResult> check_nvml(const NvmlQuery& query, size_t pci_gpus, size_t usable) {
  if (!query.info) {
    if (pci_gpus == 0) return {skipped("gpu.driver", "no NVIDIA GPU on the PCI bus; " + query.error)};
    return {make_result("gpu.driver", Status::Fail, "no NVML", "driver loaded",
                        "this node has " + std::to_string(pci_gpus) + " NVIDIA GPU(s) but " + query.error +
                            "; install the NVIDIA driver that matches your CUDA")};
  }
  return {driver_result(*query.info, pci_gpus, usable), memory_result(*query.info)};
}

std::string cuda_version_text(int version) {
  return std::to_string(version / 1000) + "." + std::to_string((version % 1000) / 10);
}

}  // namespace ddp::doctor
