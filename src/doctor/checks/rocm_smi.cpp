#include "doctor/checks/rocm_smi.hpp"

#include <cstdint>
#include <optional>

#include "doctor/checks/driver_library.hpp"

namespace ddp::doctor {
namespace {

// The few ROCm SMI entry points used here, declared from its stable C ABI (rocm_smi/rocm_smi.h is not on every
// node). Return codes are rsmi_status_t, where 0 is RSMI_STATUS_SUCCESS; enums are passed as int.
struct RsmiVersion {
  uint32_t major;
  uint32_t minor;
  uint32_t patch;
  const char* build;
};
using InitFn = int (*)(uint64_t);
using ShutDownFn = int (*)();
using CountFn = int (*)(uint32_t*);
using NameFn = int (*)(uint32_t, char*, size_t);
using MemoryFn = int (*)(uint32_t, int, uint64_t*);
using VersionFn = int (*)(RsmiVersion*);
using VersionStringFn = int (*)(int, char*, uint32_t);
using StatusStringFn = int (*)(int, const char**);

constexpr int kSoftwareComponentDriver = 0;  // RSMI_SW_COMP_DRIVER
constexpr int kMemoryVram = 0;               // RSMI_MEM_TYPE_VRAM

struct Api {
  InitFn init;
  ShutDownFn shut_down;
  CountFn count;
  NameFn name;
  MemoryFn memory_total;
  MemoryFn memory_used;
  VersionFn version;
  VersionStringFn version_string;
  StatusStringFn status_string;
};

std::optional<Api> bind(const SharedLibrary& library) {
  Api api{};
  const bool complete =
      library.bind("rsmi_init", api.init) && library.bind("rsmi_shut_down", api.shut_down) &&
      library.bind("rsmi_num_monitor_devices", api.count) && library.bind("rsmi_dev_name_get", api.name) &&
      library.bind("rsmi_dev_memory_total_get", api.memory_total) &&
      library.bind("rsmi_dev_memory_usage_get", api.memory_used) && library.bind("rsmi_version_get", api.version) &&
      library.bind("rsmi_version_str_get", api.version_string) && library.bind("rsmi_status_string", api.status_string);
  if (!complete) return std::nullopt;
  return api;
}

std::string failed(const Api& api, const char* call, int rc) {
  const char* text = nullptr;
  if (api.status_string(rc, &text) != 0 || text == nullptr) return std::string(call) + ": error " + std::to_string(rc);
  return std::string(call) + ": " + text;
}

// Reads everything with ROCm SMI initialised; returns the error text of the first call that failed.
std::string read_report(const Api& api, DriverReport& report) {
  char driver[96] = {};
  if (const int rc = api.version_string(kSoftwareComponentDriver, driver, sizeof driver); rc != 0) {
    return failed(api, "rsmi_version_str_get", rc);
  }
  RsmiVersion version{};
  if (const int rc = api.version(&version); rc != 0) return failed(api, "rsmi_version_get", rc);
  report.versions = "driver " + std::string(driver) + ", ROCm SMI " + std::to_string(version.major) + "." +
                    std::to_string(version.minor) + "." + std::to_string(version.patch);
  uint32_t count = 0;
  if (const int rc = api.count(&count); rc != 0) return failed(api, "rsmi_num_monitor_devices", rc);
  constexpr uint32_t kMaxGpus = 1024;  // far above any node; bounds the work on a strange answer
  for (uint32_t i = 0; i < count && i < kMaxGpus; ++i) {
    char name[128] = {};
    DriverGpu gpu;
    if (const int rc = api.name(i, name, sizeof name - 1); rc != 0) return failed(api, "rsmi_dev_name_get", rc);
    gpu.name = name;
    if (const int rc = api.memory_total(i, kMemoryVram, &gpu.memory_total); rc != 0) {
      return failed(api, "rsmi_dev_memory_total_get", rc);
    }
    if (const int rc = api.memory_used(i, kMemoryVram, &gpu.memory_used); rc != 0) {
      return failed(api, "rsmi_dev_memory_usage_get", rc);
    }
    report.gpus.push_back(std::move(gpu));
  }
  return "";
}

std::string read_initialised(const Api& api, DriverReport& report) {
  if (const int rc = api.init(0); rc != 0) return failed(api, "rsmi_init", rc);
  std::string error = read_report(api, report);
  api.shut_down();
  return error;
}

}  // namespace

std::vector<std::string> default_rocm_smi_libraries() {
  return {"librocm_smi64.so.1", "librocm_smi64.so", "/opt/rocm/lib/librocm_smi64.so"};
}

DriverQuery query_rocm_smi(const std::string& library_path) {
  return query_driver_library<Api>(library_path, {"ROCm SMI", "ROCm SMI is not installed here", "ROCm too old"}, bind,
                                   read_initialised);
}

}  // namespace ddp::doctor
