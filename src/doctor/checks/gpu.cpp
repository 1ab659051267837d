#include "doctor/checks/gpu.hpp"

#include <algorithm>
#include <set>

#include "base/parse.hpp"
#include "doctor/checks/nvml.hpp"
#include "doctor/checks/rocm_smi.hpp"

namespace ddp::doctor {
namespace {

constexpr double kUsedMemoryWarnFraction = 0.10;

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t comma; (comma = text.find(',', start)) != std::string::npos; start = comma + 1) {
    parts.push_back(text.substr(start, comma - start));
  }
  parts.push_back(text.substr(start));
  return parts;
}

bool is_uuid(const std::string& entry) { return entry.rfind("GPU-", 0) == 0 || entry.rfind("MIG-", 0) == 0; }

std::string joined(const std::vector<std::string>& parts, const char* separator) {
  std::string text;
  for (size_t i = 0; i < parts.size(); ++i) text += (i ? separator : "") + parts[i];
  return text;
}

std::string gpus_of(const NodeGpus& node) {
  return node.vendor ? std::string(to_string(*node.vendor)) + " GPU(s)" : "GPU(s)";
}

const char* kernel_driver(GpuVendor vendor) { return vendor == GpuVendor::Nvidia ? "nvidia" : "amdgpu"; }

// The vendor's words for the fixes the checks name.
struct VendorHints {
  const char* lost;       // a GPU the library does not see
  const char* install;    // no library
  const char* processes;  // who holds memory
};

VendorHints hints(GpuVendor vendor) {
  if (vendor == GpuVendor::Nvidia) {
    return {"check dmesg for Xid errors and nvidia-smi, then drain the node",
            "install the NVIDIA driver that matches your CUDA", "nvidia-smi lists the processes"};
  }
  return {"check dmesg for amdgpu errors and rocm-smi, then drain the node",
          "install ROCm (rocm-smi) with the amdgpu driver that matches your ROCm", "rocm-smi --showpids lists them"};
}

CheckResult driver_result(const DriverReport& report, GpuVendor vendor, size_t pci_gpus, size_t usable) {
  std::string value = report.versions + ", " + std::to_string(report.gpus.size()) + " GPU(s)";
  if (!report.gpus.empty()) value += " " + report.gpus.front().name;
  const std::string threshold = "sees >= " + std::to_string(usable) + " usable GPU(s)";
  // Under Slurm's ConstrainDevices the library sees only the job's GPUs, so fewer than on the bus is normal;
  // fewer than the task should use is not.
  if (report.gpus.size() < usable) {
    return make_result(checks::kGpuDriver, Status::Fail, value, threshold,
                       "the driver sees " + std::to_string(report.gpus.size()) + " of the " + std::to_string(pci_gpus) +
                           " GPUs on the PCI bus: a GPU fell off the bus or failed to "
                           "start; " +
                           hints(vendor).lost);
  }
  return make_result(checks::kGpuDriver, Status::Ok, value, threshold);
}

CheckResult memory_result(const DriverReport& report, GpuVendor vendor) {
  std::string busy;
  uint64_t most_used = 0;
  for (size_t i = 0; i < report.gpus.size(); ++i) {
    const DriverGpu& gpu = report.gpus[i];
    most_used = std::max<uint64_t>(most_used, gpu.memory_used);
    if (gpu.memory_total > 0 && gpu.memory_used > kUsedMemoryWarnFraction * static_cast<double>(gpu.memory_total)) {
      busy += (busy.empty() ? "" : ", ") + std::string("GPU ") + std::to_string(i) + " " +
              format_bytes(gpu.memory_used) + " of " + format_bytes(gpu.memory_total);
    }
  }
  const std::string value = "most used " + format_bytes(most_used);
  const std::string threshold = "<= " + format_fixed(kUsedMemoryWarnFraction * 100, 0) + "% in use";
  if (busy.empty()) return make_result(checks::kGpuMemory, Status::Ok, value, threshold);
  return make_result(checks::kGpuMemory, Status::Warn, value, threshold,
                     "already in use before training: " + busy + "; another job or a leftover process holds it (" +
                         hints(vendor).processes + ")");
}

DriverQuery first_rocm_smi(const std::vector<std::string>& libraries) {
  DriverQuery query;
  for (const std::string& library : libraries) {
    query = query_rocm_smi(library);
    if (query.loaded) return query;
  }
  return query;
}

}  // namespace

const char* NodeGpus::visible_variable() const { return visible_devices_variable(vendor.value_or(GpuVendor::Nvidia)); }

NodeGpus scan_gpus(const std::string& sysfs_root) {
  NodeGpus node;
  const std::vector<GpuDevice> gpus = enumerate_gpus(read_pci_functions(sysfs_root));
  node.vendor = planned_vendor(gpus);
  for (const GpuDevice& gpu : gpus) {
    if (gpu.vendor == node.vendor) node.gpus.push_back(gpu);
  }
  return node;
}

VisibleGpus parse_visible_devices(const std::optional<std::string>& visible_devices) {
  VisibleGpus visible;
  if (!visible_devices) {
    visible.all = true;
    return visible;
  }
  // Old Slurm releases write "NoDevFiles" for a job without GPUs; CUDA reads it as no device, like "".
  if (visible_devices->empty() || *visible_devices == "NoDevFiles") return visible;
  const auto parts = split_commas(*visible_devices);
  std::set<std::string> seen;
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string& entry = parts[i];
    const bool valid = (parse_uint(entry, 1u << 16) || is_uuid(entry)) && seen.insert(entry).second;
    if (!valid) {
      visible.ignored = joined(std::vector<std::string>(parts.begin() + static_cast<long>(i), parts.end()), ",");
      break;
    }
    visible.entries.push_back(entry);
  }
  return visible;
}

CheckResult check_visible_gpus(const NodeGpus& node, const std::optional<std::string>& visible_devices,
                               bool needs_gpu) {
  const CheckInfo& check = checks::kGpuVisible;
  const size_t node_gpus = node.gpus.size();
  const VisibleGpus visible = parse_visible_devices(visible_devices);
  const std::string variable = node.visible_variable();
  const std::string shown = visible_devices ? variable + "=" + quote(*visible_devices) : variable + " unset";
  const std::string threshold = needs_gpu ? ">= 1 usable, all exist" : "all exist";
  for (const auto& entry : visible.entries) {
    const auto index = parse_uint(entry, 1u << 16);
    if (index && *index >= node_gpus) {
      return make_result(check, Status::Fail, shown, threshold,
                         "GPU " + entry + " does not exist: this node has " + std::to_string(node_gpus) + " " +
                             gpus_of(node) + "; request GPUs with --gres=gpu:N and leave " + variable + " to Slurm");
    }
  }
  if (!visible.ignored.empty()) {
    return make_result(check, Status::Fail, shown, threshold,
                       std::string(node.vendor == GpuVendor::Amd ? "ROCr" : "CUDA") + " stops reading at " +
                           quote(visible.ignored) +
                           " (not an index or GPU-/MIG- UUID, or a duplicate): the GPUs after it are not used");
  }
  const size_t usable = visible.all ? node_gpus : visible.entries.size();
  const std::string value = std::to_string(usable) + " of " + std::to_string(node_gpus) + " usable";
  if (usable == 0 && (needs_gpu || node_gpus > 0)) {
    const std::string why = node_gpus == 0 ? "this node has no GPU" : shown + " hides every GPU";
    return make_result(check, needs_gpu ? Status::Fail : Status::Warn, value, threshold,
                       why + (needs_gpu ? ", but the backend is nccl: " : ": ") +
                           "request GPUs with --gres=gpu:N (or --gpus-per-node), or use --ddp=gloo on CPU nodes");
  }
  return make_result(check, Status::Ok, value, threshold, shown);
}

CheckResult check_gpu_drivers(const NodeGpus& node) {
  const CheckInfo& check = checks::kGpuDriverBound;
  if (node.gpus.empty()) return skipped(check, "no GPU on the PCI bus");
  const std::string driver = kernel_driver(*node.vendor);
  std::vector<std::string> unbound;
  for (const GpuDevice& gpu : node.gpus) {
    if (gpu.pci.driver != driver) {
      unbound.push_back(gpu.pci.bus_id + " (" + (gpu.pci.driver.empty() ? "none" : gpu.pci.driver) + ")");
    }
  }
  const std::string value =
      std::to_string(node.gpus.size() - unbound.size()) + " of " + std::to_string(node.gpus.size()) + " on " + driver;
  if (unbound.empty()) return make_result(check, Status::Ok, value, "all on " + driver);
  const std::string fix = *node.vendor == GpuVendor::Nvidia
                              ? "install or load the nvidia kernel module (blacklist nouveau), then check dmesg"
                              : "load the amdgpu kernel module (modprobe amdgpu), then check dmesg";
  return make_result(
      check, Status::Fail, value, "all on " + driver,
      "not driven by the " + std::string(to_string(*node.vendor)) + " driver: " + joined(unbound, ", ") + "; " + fix);
}

std::vector<CheckResult> check_driver_report(const DriverQuery& query, GpuVendor vendor, size_t pci_gpus,
                                             size_t usable) {
  if (!query.report) {
    if (pci_gpus == 0) {
      return {
          skipped(checks::kGpuDriver, std::string("no ") + to_string(vendor) + " GPU on the PCI bus; " + query.error)};
    }
    // NVIDIA's driver installs NVML with itself, so its absence beside NVIDIA GPUs is a node fault. ROCm SMI is a
    // package of its own (rocm-smi-lib), not part of the amdgpu driver: without it only this check goes.
    if (vendor == GpuVendor::Amd && !query.loaded) {
      return {skipped(checks::kGpuDriver, "this node has " + std::to_string(pci_gpus) +
                                              " AMD GPU(s) but no ROCm SMI library to ask about them (" + query.error +
                                              "); install ROCm SMI (rocm-smi-lib) to check them")};
    }
    return {make_result(checks::kGpuDriver, Status::Fail, "no driver library", "driver loaded",
                        "this node has " + std::to_string(pci_gpus) + " " + to_string(vendor) + " GPU(s) but " +
                            query.error + "; " + hints(vendor).install)};
  }
  return {driver_result(*query.report, vendor, pci_gpus, usable), memory_result(*query.report, vendor)};
}

std::vector<CheckResult> check_gpu_libraries(const NodeGpus& node, size_t usable, const GpuLibraries& libraries) {
  const std::vector<std::string> rocm_smi =
      libraries.rocm_smi.empty() ? default_rocm_smi_libraries() : libraries.rocm_smi;
  const auto nvml = [&] { return libraries.nvml.empty() ? query_nvml() : query_nvml(libraries.nvml); };
  if (node.vendor == GpuVendor::Nvidia) return check_driver_report(nvml(), GpuVendor::Nvidia, node.gpus.size(), usable);
  if (node.vendor == GpuVendor::Amd) {
    return check_driver_report(first_rocm_smi(rocm_smi), GpuVendor::Amd, node.gpus.size(), usable);
  }
  // No GPU on the bus: a library that loads still tells what the node's driver sees (a GPU that fell off the bus).
  const DriverQuery nvidia = nvml();
  if (nvidia.loaded) return check_driver_report(nvidia, GpuVendor::Nvidia, 0, usable);
  const DriverQuery amd = first_rocm_smi(rocm_smi);
  if (amd.loaded) return check_driver_report(amd, GpuVendor::Amd, 0, usable);
  return {skipped(checks::kGpuDriver, "no GPU on the PCI bus; neither NVML nor ROCm SMI is installed")};
}

}  // namespace ddp::doctor
