#include "topology/gpus.hpp"

#include <dirent.h>
#include <limits.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <memory>
#include <set>

namespace ddp {
namespace {

constexpr unsigned kNvidiaVendor = 0x10de;
constexpr unsigned kAmdGraphicsVendor = 0x1002;
constexpr unsigned kDisplayClass = 0x03;      // high byte of the class: VGA, 3D, other display controllers
constexpr unsigned kAcceleratorClass = 0x12;  // processing accelerators
constexpr size_t kMaxPciFunctions = 4096;     // far above any node; bounds the work on a strange sysfs

std::optional<unsigned long> read_hex(const std::string& path) {
  std::ifstream file(path);
  std::string text;
  if (!(file >> text) || text.size() > 10) return std::nullopt;
  try {
    size_t used = 0;
    const unsigned long value = std::stoul(text, &used, 16);
    if (used == text.size()) return value;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

std::string bound_driver(const std::string& device_dir) {
  char target[PATH_MAX];
  const ssize_t length = readlink((device_dir + "/driver").c_str(), target, sizeof target - 1);
  if (length <= 0) return "";
  const std::string path(target, static_cast<size_t>(length));
  return path.substr(path.find_last_of('/') + 1);
}

// rsmiN indices count as the numbering only when every AMD GPU has one and no two share it.
bool rsmi_numbers_all(const std::vector<GpuDevice>& amd) {
  std::set<unsigned> seen;
  for (const GpuDevice& gpu : amd) {
    if (!gpu.pci.rsmi_index || !seen.insert(*gpu.pci.rsmi_index).second) return false;
  }
  return true;
}

}  // namespace

const char* to_string(GpuVendor vendor) { return vendor == GpuVendor::Nvidia ? "NVIDIA" : "AMD"; }

const char* visible_devices_variable(GpuVendor vendor) {
  return vendor == GpuVendor::Nvidia ? "CUDA_VISIBLE_DEVICES" : "ROCR_VISIBLE_DEVICES";
}

std::optional<GpuVendor> gpu_vendor(const PciFunction& function) {
  const unsigned base_class = function.class_id >> 8;
  if (function.vendor_id == kNvidiaVendor && base_class == kDisplayClass) return GpuVendor::Nvidia;
  if (function.vendor_id == kAmdGraphicsVendor &&
      (base_class == kDisplayClass || base_class == kAcceleratorClass || function.rsmi_index || function.opencl_gpu)) {
    return GpuVendor::Amd;
  }
  return std::nullopt;
}

std::vector<GpuDevice> enumerate_gpus(const std::vector<PciFunction>& functions) {
  std::vector<GpuDevice> nvidia, amd;
  for (const PciFunction& function : functions) {
    const auto vendor = gpu_vendor(function);
    if (vendor) (*vendor == GpuVendor::Nvidia ? nvidia : amd).push_back({function, *vendor, 0});
  }
  const auto by_bus = [](const GpuDevice& a, const GpuDevice& b) { return a.pci.bus_id < b.pci.bus_id; };
  std::sort(nvidia.begin(), nvidia.end(), by_bus);
  std::sort(amd.begin(), amd.end(), by_bus);
  for (size_t i = 0; i < nvidia.size(); ++i) nvidia[i].index = static_cast<unsigned>(i);
  const bool by_rsmi = rsmi_numbers_all(amd);
  for (size_t i = 0; i < amd.size(); ++i) amd[i].index = by_rsmi ? *amd[i].pci.rsmi_index : static_cast<unsigned>(i);
  std::sort(amd.begin(), amd.end(), [](const GpuDevice& a, const GpuDevice& b) { return a.index < b.index; });
  nvidia.insert(nvidia.end(), amd.begin(), amd.end());
  return nvidia;
}

std::optional<GpuVendor> planned_vendor(const std::vector<GpuDevice>& gpus) {
  if (gpus.empty()) return std::nullopt;
  const size_t amd = static_cast<size_t>(
      std::count_if(gpus.begin(), gpus.end(), [](const GpuDevice& g) { return g.vendor == GpuVendor::Amd; }));
  const size_t nvidia = gpus.size() - amd;
  return amd > nvidia ? GpuVendor::Amd : GpuVendor::Nvidia;
}

std::vector<PciFunction> read_pci_functions(const std::string& sysfs_root) {
  const std::string devices = sysfs_root + "/bus/pci/devices";
  std::vector<PciFunction> functions;
  struct CloseDir {
    void operator()(DIR* dir) const { closedir(dir); }
  };
  const std::unique_ptr<DIR, CloseDir> dir(opendir(devices.c_str()));
  if (!dir) return functions;
  while (const dirent* entry = readdir(dir.get())) {
    if (functions.size() >= kMaxPciFunctions) break;
    const std::string name = entry->d_name;
    if (name.empty() || name[0] == '.') continue;
    const std::string path = devices + "/" + name;
    const auto vendor = read_hex(path + "/vendor");
    const auto pci_class = read_hex(path + "/class");  // 0x030200: class, subclass, programming interface
    if (!vendor || !pci_class) continue;
    PciFunction function;
    function.bus_id = name;
    std::transform(function.bus_id.begin(), function.bus_id.end(), function.bus_id.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    function.vendor_id = static_cast<unsigned>(*vendor);
    function.class_id = static_cast<unsigned>(*pci_class >> 8);
    // The driver link is read for GPUs only: it is all the doctor asks of it.
    if (gpu_vendor(function)) function.driver = bound_driver(path);
    functions.push_back(std::move(function));
  }
  std::sort(functions.begin(), functions.end(),
            [](const PciFunction& a, const PciFunction& b) { return a.bus_id < b.bus_id; });
  return functions;
}

}  // namespace ddp
