#include "doctor/gpu.hpp"

#include <dirent.h>
#include <limits.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <set>

#include "parse.hpp"

namespace ddp::doctor {
namespace {

constexpr unsigned long kNvidiaVendor = 0x10de;
constexpr unsigned long kDisplayClass = 0x03;  // class code's top byte: display controller (VGA, 3D)

std::optional<unsigned long> read_hex(const std::string& path) {
  std::ifstream file(path);
  std::string text;
  if (!(file >> text)) return std::nullopt;
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

}  // namespace

std::vector<PciGpu> scan_nvidia_gpus(const std::string& sysfs_root) {
  const std::string devices = sysfs_root + "/bus/pci/devices";
  std::vector<PciGpu> gpus;
  DIR* dir = opendir(devices.c_str());
  if (dir == nullptr) return gpus;
  while (const dirent* entry = readdir(dir)) {
    const std::string name = entry->d_name;
    if (name[0] == '.') continue;
    const std::string path = devices + "/" + name;
    const auto vendor = read_hex(path + "/vendor");
    const auto pci_class = read_hex(path + "/class");
    if (vendor == kNvidiaVendor && pci_class && (*pci_class >> 16) == kDisplayClass) {
      gpus.push_back({name, bound_driver(path)});
    }
  }
  closedir(dir);
  std::sort(gpus.begin(), gpus.end(), [](const PciGpu& a, const PciGpu& b) { return a.bus_id < b.bus_id; });
  return gpus;
}

VisibleGpus parse_visible_devices(const std::optional<std::string>& cuda_visible_devices) {
  VisibleGpus visible;
  if (!cuda_visible_devices) {
    visible.all = true;
    return visible;
  }
  // Old Slurm releases write "NoDevFiles" for a job without GPUs; CUDA reads it as no device, like "".
  if (cuda_visible_devices->empty() || *cuda_visible_devices == "NoDevFiles") return visible;
  const auto parts = split_commas(*cuda_visible_devices);
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

CheckResult check_visible_gpus(size_t node_gpus, const std::optional<std::string>& cuda_visible_devices,
                               bool needs_gpu) {
  const std::string check = "gpu.visible";
  const VisibleGpus visible = parse_visible_devices(cuda_visible_devices);
  const std::string shown = cuda_visible_devices ? "CUDA_VISIBLE_DEVICES=" + quote(*cuda_visible_devices)
                                                 : "CUDA_VISIBLE_DEVICES unset";
  const std::string threshold = needs_gpu ? ">= 1 usable, all exist" : "all exist";
  for (const auto& entry : visible.entries) {
    const auto index = parse_uint(entry, 1u << 16);
    if (index && *index >= node_gpus) {
      return make_result(check, Status::Fail, shown, threshold,
                         "GPU " + entry + " does not exist: this node has " + std::to_string(node_gpus) +
                             " NVIDIA GPU(s); request GPUs with --gres=gpu:N and leave CUDA_VISIBLE_DEVICES to Slurm");
    }
  }
  if (!visible.ignored.empty()) {
    return make_result(check, Status::Fail, shown, threshold,
                       "CUDA stops reading at " + quote(visible.ignored) +
                           " (not an index or GPU-/MIG- UUID, or a duplicate): the GPUs after it are not used");
  }
  const size_t usable = visible.all ? node_gpus : visible.entries.size();
  const std::string value = std::to_string(usable) + " of " + std::to_string(node_gpus) + " usable";
  if (usable == 0 && (needs_gpu || node_gpus > 0)) {
    const std::string why = node_gpus == 0 ? "this node has no NVIDIA GPU" : shown + " hides every GPU";
    return make_result(check, needs_gpu ? Status::Fail : Status::Warn, value, threshold,
                       why + (needs_gpu ? ", but the backend is nccl: " : ": ") +
                           "request GPUs with --gres=gpu:N (or --gpus-per-node), or use --ddp=gloo on CPU nodes");
  }
  return make_result(check, Status::Ok, value, threshold, shown);
}

CheckResult check_gpu_drivers(const std::vector<PciGpu>& gpus) {
  const std::string check = "gpu.driver_bound";
  if (gpus.empty()) return skipped(check, "no NVIDIA GPU on the PCI bus");
  std::vector<std::string> unbound;
  for (const auto& gpu : gpus) {
    if (gpu.driver != "nvidia") unbound.push_back(gpu.bus_id + " (" + (gpu.driver.empty() ? "none" : gpu.driver) + ")");
  }
  const std::string value = std::to_string(gpus.size() - unbound.size()) + " of " + std::to_string(gpus.size()) +
                            " on nvidia";
  if (unbound.empty()) return make_result(check, Status::Ok, value, "all on nvidia");
  return make_result(check, Status::Fail, value, "all on nvidia",
                     "not driven by the NVIDIA driver: " + joined(unbound, ", ") +
                         "; install or load the nvidia kernel module (blacklist nouveau), then check dmesg");
}

}  // namespace ddp::doctor
