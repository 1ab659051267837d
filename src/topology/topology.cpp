#include "topology/topology.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <hwloc.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <tuple>

#include "base/child_process.hpp"
#include "base/parse.hpp"
#include "core/error.hpp"
#include "topology/id_list.hpp"

namespace ddp {
namespace {

constexpr unsigned kAmazonVendor = 0x1d0f;
constexpr unsigned kInfiniBandClass = 0x0207;
constexpr unsigned kEthernetClass = 0x0200;

constexpr size_t kMaxExportBytes = 256u << 20;  // an export of the largest machines is a few MB

constexpr const char* kUnwantedComponents[] = {"pci", "opencl", "gl", "cuda", "nvml", "rsmi", "levelzero"};

using TopologyPtr = std::unique_ptr<hwloc_topology, decltype(&hwloc_topology_destroy)>;

std::string system_error_text() { return errno != 0 ? std::strerror(errno) : "unknown error"; }

// hwloc dlopens every plugin of its plugin directory at each topology init (and unloads them at destroy), GL and
// OpenCL with their X11 and ICD libraries, although all are blacklisted below. In a fresh slurmstepd that cost
// more than everything else --ddp does. Pointing hwloc at no plugin directory avoids it; the environment is
// slurmstepd's own (not the tasks'), and a value the admin set is left alone. hwloc has no other way to say it,
// and the environment is not thread-safe: it is written once per process and never removed again, so the window
// in which another thread of slurmstepd could read it while it changes is one call, not two per topology load;
// the value left behind only keeps hwloc's plugins out of the process's later topology reads too.
void without_hwloc_plugins() {
  static const bool done = [] {
    if (std::getenv("HWLOC_PLUGINS_PATH") == nullptr)
      setenv("HWLOC_PLUGINS_PATH", "/nonexistent/slurm-ddp-no-hwloc-plugins", 0);
    return true;
  }();
  (void)done;
}

// A topology set up to read what this file needs; `xml_of_this_system`: the XML it will read is an export of the
// running system.
TopologyPtr configured_topology(bool xml_of_this_system) {
  hwloc_topology_t raw = nullptr;
  without_hwloc_plugins();
  const int rc = hwloc_topology_init(&raw);
  if (rc != 0) throw Error("hwloc could not start: " + system_error_text());
  TopologyPtr topology(raw, hwloc_topology_destroy);
  // The default filter drops every PCI and OS device, and with them the GPUs and NICs this is all about.
  hwloc_topology_set_io_types_filter(raw, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  // Slurm numbers cores over the whole machine; a topology restricted to this process's cgroup would not.
  hwloc_topology_set_flags(
      raw, HWLOC_TOPOLOGY_FLAG_INCLUDE_DISALLOWED |
               (xml_of_this_system ? static_cast<unsigned long>(HWLOC_TOPOLOGY_FLAG_IS_THISSYSTEM) : 0UL));
  // Linux's sysfs gives every PCI, network and RDMA device needed here. The plugins would load libpciaccess
  // (which leaks about 1 KiB per load in hwloc 2.9), OpenCL and CUDA drivers, or open X displays, inside
  // slurmstepd: not for a device list.
  for (const char* component : kUnwantedComponents) {
    hwloc_topology_set_components(raw, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, component);
  }
  return topology;
}

TopologyPtr load_topology(const std::optional<std::string>& xml_path, bool xml_is_this_system = false) {
  TopologyPtr topology = configured_topology(xml_is_this_system);
  hwloc_topology_t raw = topology.get();
  errno = 0;
  if (xml_path && !std::ifstream(*xml_path)) {
    throw Error("topology file " + quote(*xml_path) + " cannot be read: " + system_error_text() +
                "; write one with 'lstopo-no-graphics --of xml FILE' on the node");
  }
  // hwloc parses an XML file already when it is named, and the rest of the topology when loading.
  errno = 0;
  if ((xml_path && hwloc_topology_set_xml(raw, xml_path->c_str()) != 0) || hwloc_topology_load(raw) != 0) {
    if (!xml_path) throw Error("hwloc cannot read this system's topology: " + system_error_text());
    throw Error("hwloc cannot read topology file " + quote(*xml_path) + ": " + system_error_text() +
                "; it must be hwloc 1.x or 2.x XML from 'lstopo --of xml'");
  }
  return topology;
}

// hwloc reads these from the environment of whichever process loads a topology, before anything the caller set,
// and has no call to ignore them: HWLOC_XMLFILE, HWLOC_SYNTHETIC, HWLOC_FSROOT and HWLOC_CPUID_PATH put a file, a
// description or another directory in place of the system; HWLOC_COMPONENTS picks the discovery components.
constexpr const char* kHwlocSystemOverrides[] = {"HWLOC_XMLFILE", "HWLOC_SYNTHETIC", "HWLOC_FSROOT", "HWLOC_CPUID_PATH",
                                                 "HWLOC_COMPONENTS"};

// The child's side of system_topology_xml: 'X' and the export, or 'E' and why there is none.
std::string probe_without_overrides() {
  for (const char* name : kHwlocSystemOverrides) unsetenv(name);
  try {
    const TopologyPtr topology = load_topology(std::nullopt);
    char* xml = nullptr;
    int length = 0;
    errno = 0;
    if (hwloc_topology_export_xmlbuffer(topology.get(), &xml, &length, 0) != 0 || length < 1) {
      throw Error("hwloc cannot export this system's topology: " + system_error_text());
    }
    std::string reply = "X" + std::string(xml, static_cast<size_t>(length - 1));  // without hwloc's final NUL
    hwloc_free_xmlbuffer(topology.get(), xml);
    return reply;
  } catch (const std::exception& e) {
    return std::string("E") + e.what();
  }
}

std::vector<unsigned> bitmap_ids(hwloc_const_bitmap_t bitmap) {
  std::vector<unsigned> ids;
  if (bitmap == nullptr) return ids;
  // A corrupt XML file can hold an infinite set; no machine has CPUs beyond what a CPU list may name.
  for (int id = hwloc_bitmap_first(bitmap); id >= 0 && id <= static_cast<int>(kMaxListedId);
       id = hwloc_bitmap_next(bitmap, id)) {
    ids.push_back(static_cast<unsigned>(id));
  }
  return ids;
}

std::string pci_bus_id(const hwloc_obj_t pci) {
  const auto& a = pci->attr->pcidev;
  char text[16];
  std::snprintf(text, sizeof text, "%04x:%02x:%02x.%01x", a.domain, a.bus, a.dev, a.func);
  return text;
}

auto pci_order(const hwloc_obj_t pci) {
  const auto& a = pci->attr->pcidev;
  return std::make_tuple(a.domain, a.bus, a.dev, a.func);
}

bool is_host_bridge(const hwloc_obj_t obj) {
  return obj->type == HWLOC_OBJ_BRIDGE && obj->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_HOST;
}

// The PCI function an OS device belongs to, or null for one hwloc found elsewhere.
hwloc_obj_t pci_function_of(const hwloc_obj_t osdev) {
  const hwloc_obj_t parent = osdev->parent;
  return parent != nullptr && parent->type == HWLOC_OBJ_PCI_DEVICE ? parent : nullptr;
}

// The I/O objects above `device` up to its host bridge, nearest first, and the CPU-side object they hang from.
// Walked by hand: hwloc_get_common_ancestor_obj compares depths, which are negative for I/O objects, and
// crashes on real topologies (p4d, SNC4).
struct IoPath {
  std::vector<hwloc_obj_t> bridges;
  hwloc_obj_t cpu_side = nullptr;
};

IoPath io_path(hwloc_obj_t device) {
  IoPath path;
  hwloc_obj_t obj = device->parent;
  while (obj != nullptr && hwloc_obj_type_is_io(obj->type)) {
    path.bridges.push_back(obj);
    obj = obj->parent;
  }
  path.cpu_side = obj;
  return path;
}

bool has_package_at_or_above(hwloc_obj_t obj) {
  for (; obj != nullptr; obj = obj->parent) {
    if (obj->type == HWLOC_OBJ_PACKAGE) return true;
  }
  return false;
}

// Between two CPU-side objects (packages, groups, caches, the machine), by the NUMA nodes under the object
// where their ancestries meet.
Closeness cpu_side_closeness(hwloc_obj_t a, hwloc_obj_t b) {
  std::vector<hwloc_obj_t> ancestors_of_a;
  for (hwloc_obj_t obj = a; obj != nullptr; obj = obj->parent) ancestors_of_a.push_back(obj);
  hwloc_obj_t common = b;
  while (common != nullptr && std::find(ancestors_of_a.begin(), ancestors_of_a.end(), common) == ancestors_of_a.end()) {
    common = common->parent;
  }
  if (common == nullptr) return Closeness::System;
  if (common->nodeset == nullptr || hwloc_bitmap_weight(common->nodeset) <= 1) return Closeness::Node;
  return has_package_at_or_above(common) ? Closeness::Package : Closeness::System;
}

Closeness device_closeness(hwloc_obj_t a, hwloc_obj_t b) {
  const IoPath path_a = io_path(a);
  const IoPath path_b = io_path(b);
  for (size_t below_a = 0; below_a < path_a.bridges.size(); ++below_a) {
    const auto found = std::find(path_b.bridges.begin(), path_b.bridges.end(), path_a.bridges[below_a]);
    if (found == path_b.bridges.end()) continue;
    if (is_host_bridge(*found)) return Closeness::Phb;
    // A PCIe switch shows as an upstream bridge with one downstream bridge per port: devices behind one
    // switch are at most one bridge below the bridge their paths meet at.
    const size_t below_b = static_cast<size_t>(found - path_b.bridges.begin());
    return below_a <= 1 && below_b <= 1 ? Closeness::Pix : Closeness::Pxb;
  }
  if (path_a.cpu_side == nullptr || path_b.cpu_side == nullptr) return Closeness::System;
  return cpu_side_closeness(path_a.cpu_side, path_b.cpu_side);
}

RdmaKind rdma_kind(const hwloc_obj_t pci) {
  if (pci == nullptr) return RdmaKind::Other;
  if (pci->attr->pcidev.vendor_id == kAmazonVendor) return RdmaKind::Efa;
  if (pci->attr->pcidev.class_id == kInfiniBandClass) return RdmaKind::InfiniBand;
  if (pci->attr->pcidev.class_id == kEthernetClass) return RdmaKind::RoCE;
  return RdmaKind::Other;
}

// The object closeness is measured from: a device's PCI function, or the OS device itself outside PCI.
struct Found {
  hwloc_obj_t anchor;
  hwloc_obj_t osdev;  // null for GPUs, which are found as PCI functions
};

bool found_before(const Found& a, const Found& b) {
  if ((a.anchor->type == HWLOC_OBJ_PCI_DEVICE) != (b.anchor->type == HWLOC_OBJ_PCI_DEVICE)) {
    return a.anchor->type == HWLOC_OBJ_PCI_DEVICE;
  }
  if (a.anchor->type == HWLOC_OBJ_PCI_DEVICE && pci_order(a.anchor) != pci_order(b.anchor)) {
    return pci_order(a.anchor) < pci_order(b.anchor);
  }
  return std::strcmp(a.osdev ? a.osdev->name : "", b.osdev ? b.osdev->name : "") < 0;
}

// A PCI function as gpus.hpp classifies it, with the ROCm SMI and OpenCL devices hwloc found under it.
PciFunction pci_function(const hwloc_obj_t pci) {
  PciFunction function;
  function.bus_id = pci_bus_id(pci);
  function.vendor_id = pci->attr->pcidev.vendor_id;
  function.class_id = pci->attr->pcidev.class_id;
  for (hwloc_obj_t osdev = pci->io_first_child; osdev != nullptr; osdev = osdev->next_sibling) {
    if (osdev->type != HWLOC_OBJ_OS_DEVICE || osdev->name == nullptr) continue;
    const std::string name = osdev->name;
    const auto rsmi =
        name.rfind("rsmi", 0) == 0 ? parse_uint(std::string_view(name).substr(4), 1u << 16) : std::nullopt;
    if (rsmi) function.rsmi_index = static_cast<unsigned>(*rsmi);
    const char* type = hwloc_obj_get_info_by_name(osdev, "OpenCLDeviceType");
    if (name.rfind("opencl", 0) == 0 && type != nullptr && std::strcmp(type, "GPU") == 0) function.opencl_gpu = true;
  }
  return function;
}

struct FoundGpus {
  std::vector<std::pair<GpuDevice, hwloc_obj_t>> planned;  // of the planned vendor, in its numbering
  std::optional<GpuVendor> vendor;
  std::vector<std::string> unplanned;
};

FoundGpus find_gpus(hwloc_topology_t topology) {
  std::vector<PciFunction> functions;
  std::map<std::string, hwloc_obj_t> by_bus_id;
  for (hwloc_obj_t pci = hwloc_get_next_pcidev(topology, nullptr); pci != nullptr;
       pci = hwloc_get_next_pcidev(topology, pci)) {
    functions.push_back(pci_function(pci));
    by_bus_id.emplace(functions.back().bus_id, pci);
  }
  FoundGpus found;
  const std::vector<GpuDevice> gpus = enumerate_gpus(functions);
  found.vendor = planned_vendor(gpus);
  for (const GpuDevice& gpu : gpus) {
    if (gpu.vendor == found.vendor) {
      found.planned.emplace_back(gpu, by_bus_id.at(gpu.pci.bus_id));
    } else {
      found.unplanned.push_back(gpu.pci.bus_id);
    }
  }
  return found;
}

std::vector<Found> find_osdevs(hwloc_topology_t topology, hwloc_obj_osdev_type_t type) {
  std::vector<Found> devices;
  for (hwloc_obj_t osdev = hwloc_get_next_osdev(topology, nullptr); osdev != nullptr;
       osdev = hwloc_get_next_osdev(topology, osdev)) {
    if (osdev->attr->osdev.type != type || osdev->name == nullptr) continue;
    const hwloc_obj_t pci = pci_function_of(osdev);
    devices.push_back({pci != nullptr ? pci : osdev, osdev});
  }
  std::sort(devices.begin(), devices.end(), found_before);
  return devices;
}

std::string bus_id_of(const Found& device) {
  return device.anchor->type == HWLOC_OBJ_PCI_DEVICE ? pci_bus_id(device.anchor) : std::string();
}

// Builds NodeHardware from a loaded topology; keeps the hwloc objects only while it runs.
class Inventory {
 public:
  explicit Inventory(hwloc_topology_t topology) : topology_(topology) {}

  NodeHardware take(std::string source) {
    hw_.source = std::move(source);
    hw_.packages = static_cast<unsigned>(std::max(0, hwloc_get_nbobjs_by_type(topology_, HWLOC_OBJ_PACKAGE)));
    hw_.pus = static_cast<unsigned>(std::max(0, hwloc_get_nbobjs_by_type(topology_, HWLOC_OBJ_PU)));
    read_cores();
    FoundGpus gpus = find_gpus(topology_);
    hw_.gpu_vendor = gpus.vendor;
    hw_.unplanned_gpus = std::move(gpus.unplanned);
    for (const auto& [device, pci] : gpus.planned) {
      gpu_devices_.push_back(device);
      gpus_.push_back({pci, nullptr});
    }
    nets_ = find_osdevs(topology_, HWLOC_OBJ_OSDEV_NETWORK);
    rdma_ = find_osdevs(topology_, HWLOC_OBJ_OSDEV_OPENFABRICS);
    read_rdma();
    read_nets();
    read_gpus();
    read_numa_nodes();
    return std::move(hw_);
  }

 private:
  void read_cores() {
    const int cores = hwloc_get_nbobjs_by_type(topology_, HWLOC_OBJ_CORE);
    // Some topologies (XML from odd platforms) have no Core objects: each CPU then counts as a core.
    const hwloc_obj_type_t unit = cores > 0 ? HWLOC_OBJ_CORE : HWLOC_OBJ_PU;
    for (hwloc_obj_t obj = hwloc_get_next_obj_by_type(topology_, unit, nullptr); obj != nullptr;
         obj = hwloc_get_next_obj_by_type(topology_, unit, obj)) {
      std::vector<unsigned> cpus = bitmap_ids(obj->cpuset);
      if (cpus.empty()) continue;
      for (unsigned cpu : cpus) {
        if (cpu >= core_of_cpu_.size()) core_of_cpu_.resize(cpu + 1, kNoCore);
        core_of_cpu_[cpu] = hw_.cores.size();
      }
      hw_.cores.push_back(std::move(cpus));
    }
  }

  size_t locality_of(hwloc_const_cpuset_t cpuset) {
    std::vector<unsigned> cpus = bitmap_ids(cpuset);
    const auto known = locality_index_.find(cpus);
    if (known != locality_index_.end()) return known->second;
    Locality locality;
    for (unsigned cpu : cpus) {
      if (cpu < core_of_cpu_.size() && core_of_cpu_[cpu] != kNoCore) locality.cores.push_back(core_of_cpu_[cpu]);
    }
    std::sort(locality.cores.begin(), locality.cores.end());
    locality.cores.erase(std::unique(locality.cores.begin(), locality.cores.end()), locality.cores.end());
    locality.cpus = cpus;
    locality_index_.emplace(std::move(cpus), hw_.localities.size());
    hw_.localities.push_back(std::move(locality));
    return hw_.localities.size() - 1;
  }

  void read_rdma() {
    for (const Found& device : rdma_) {
      const hwloc_obj_t pci = device.anchor->type == HWLOC_OBJ_PCI_DEVICE ? device.anchor : nullptr;
      hw_.rdma.push_back({device.osdev->name, bus_id_of(device), rdma_kind(pci)});
    }
  }

  void read_nets() {
    for (const Found& net : nets_) {
      NetInterface interface = {net.osdev->name, bus_id_of(net), std::nullopt};
      for (size_t r = 0; r < rdma_.size(); ++r) {
        if (net.anchor->type == HWLOC_OBJ_PCI_DEVICE && rdma_[r].anchor == net.anchor) interface.rdma = r;
      }
      hw_.nets.push_back(std::move(interface));
    }
  }

  void read_gpus() {
    for (size_t g = 0; g < gpus_.size(); ++g) {
      const hwloc_obj_t pci = gpus_[g].anchor;
      Gpu gpu;
      gpu.pci_bus_id = pci_bus_id(pci);
      const char* model = hwloc_obj_get_info_by_name(pci, "PCIDevice");
      gpu.model = model != nullptr ? model : "";
      gpu.vendor = gpu_devices_[g].vendor;
      gpu.device_number = gpu_devices_[g].index;
      const hwloc_obj_t cpu_side = hwloc_get_non_io_ancestor_obj(topology_, pci);
      gpu.locality = locality_of(cpu_side->cpuset);
      for (hwloc_obj_t obj = cpu_side; obj != nullptr; obj = obj->parent) {
        if (obj->type == HWLOC_OBJ_PACKAGE) gpu.package = obj->logical_index;
      }
      for (const Found& other : gpus_) gpu.to_gpu.push_back(device_closeness(pci, other.anchor));
      for (const Found& net : nets_) gpu.to_net.push_back(device_closeness(pci, net.anchor));
      for (const Found& device : rdma_) gpu.to_rdma.push_back(device_closeness(pci, device.anchor));
      hw_.gpus.push_back(std::move(gpu));
    }
    assign_closest(&Gpu::to_net, &Gpu::nic);
    assign_closest(&Gpu::to_rdma, &Gpu::hca);
  }

  // Each GPU gets its closest device; among equally close ones, the one fewest GPUs (in bus order) got so
  // far, so two HCAs behind one switch serve its GPUs one each instead of one HCA serving both.
  using ClosenessOf = std::vector<Closeness> Gpu::*;  // a member pointer alias: clang-format 14 and 19 agree on it
  using ChoiceOf = std::optional<DeviceIndex> Gpu::*;
  void assign_closest(ClosenessOf closeness, ChoiceOf choice) {
    std::vector<unsigned> users;
    for (Gpu& gpu : hw_.gpus) {
      const std::vector<Closeness>& to = gpu.*closeness;
      if (to.empty()) continue;
      users.resize(to.size(), 0);
      const Closeness best = *std::min_element(to.begin(), to.end());
      std::optional<DeviceIndex> chosen;
      for (DeviceIndex d = 0; d < to.size(); ++d) {
        if (to[d] == best && (!chosen || users[d] < users[*chosen])) chosen = d;
      }
      ++users[*chosen];
      gpu.*choice = chosen;
    }
  }

  struct Nearest {
    std::optional<DeviceIndex> device;
    std::optional<Closeness> closeness;
  };

  static Nearest nearest_to(const std::vector<Found>& devices, hwloc_obj_t cpu_side) {
    Nearest nearest;
    for (DeviceIndex d = 0; d < devices.size(); ++d) {
      const hwloc_obj_t device_side = io_path(devices[d].anchor).cpu_side;
      const Closeness closeness =
          device_side != nullptr ? cpu_side_closeness(cpu_side, device_side) : Closeness::System;
      if (!nearest.closeness || closeness < *nearest.closeness) nearest = {d, closeness};
    }
    return nearest;
  }

  void read_numa_nodes() {
    for (hwloc_obj_t numa = hwloc_get_next_obj_by_type(topology_, HWLOC_OBJ_NUMANODE, nullptr); numa != nullptr;
         numa = hwloc_get_next_obj_by_type(topology_, HWLOC_OBJ_NUMANODE, numa)) {
      // Memory-only nodes (HBM, CXL, GPU memory) have no CPUs for a task to run on.
      if (numa->cpuset == nullptr || hwloc_bitmap_iszero(numa->cpuset)) continue;
      NumaNode node;
      node.os_index = numa->os_index;
      node.locality = locality_of(numa->cpuset);
      // A NUMA node hangs off the CPU-side object it is local to, where device paths are compared.
      const Nearest nic = nearest_to(nets_, numa->parent);
      const Nearest hca = nearest_to(rdma_, numa->parent);
      node.nic = nic.device;
      node.nic_closeness = nic.closeness;
      node.hca = hca.device;
      node.hca_closeness = hca.closeness;
      hw_.numa_nodes.push_back(node);
    }
    std::sort(hw_.numa_nodes.begin(), hw_.numa_nodes.end(),
              [](const NumaNode& a, const NumaNode& b) { return a.os_index < b.os_index; });
  }

  static constexpr size_t kNoCore = static_cast<size_t>(-1);
  hwloc_topology_t topology_;
  NodeHardware hw_;
  std::vector<Found> gpus_, nets_, rdma_;
  std::vector<GpuDevice> gpu_devices_;  // beside gpus_
  std::vector<size_t> core_of_cpu_;
  std::map<std::vector<unsigned>, size_t> locality_index_;
};

void apply_driver_device_numbers(NodeHardware& hw) {
  if (hw.gpu_vendor != GpuVendor::Nvidia) return;
  for (const auto& [bus_id, number] : read_nvidia_device_numbers()) {
    for (Gpu& gpu : hw.gpus) {
      if (gpu.pci_bus_id == bus_id) gpu.device_number = number;
    }
  }
}

std::optional<unsigned> device_minor(const std::string& information_file) {
  std::ifstream in(information_file);
  std::string line;
  // The file is a dozen short lines; a bound keeps a strange one from costing more.
  for (int lines = 0; lines < 64 && std::getline(in, line); ++lines) {
    static const std::string kKey = "Device Minor:";
    if (line.compare(0, kKey.size(), kKey) != 0) continue;
    const size_t digits = line.find_first_not_of(" \t", kKey.size());
    if (digits == std::string::npos) return std::nullopt;
    const auto number = parse_uint(std::string_view(line).substr(digits), 255);
    if (number) return static_cast<unsigned>(*number);
    return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace

const char* to_string(Closeness closeness) {
  switch (closeness) {
    case Closeness::Pix: return "PIX";
    case Closeness::Pxb: return "PXB";
    case Closeness::Phb: return "PHB";
    case Closeness::Node: return "NODE";
    case Closeness::Package: return "PKG";
    case Closeness::System: return "SYS";
  }
  return "?";
}

const char* to_string(RdmaKind kind) {
  switch (kind) {
    case RdmaKind::InfiniBand: return "InfiniBand";
    case RdmaKind::RoCE: return "RoCE";
    case RdmaKind::Efa: return "EFA";
    case RdmaKind::Other: return "RDMA";
  }
  return "?";
}

std::vector<std::pair<std::string, unsigned>> read_nvidia_device_numbers(const std::string& proc_dir) {
  std::vector<std::pair<std::string, unsigned>> numbers;
  struct CloseDir {
    void operator()(DIR* dir) const { closedir(dir); }
  };
  const std::unique_ptr<DIR, CloseDir> dir(opendir(proc_dir.c_str()));
  if (!dir) return numbers;
  constexpr size_t kMaxGpus = 1024;  // far above any node; bounds the work on a strange /proc
  while (const dirent* entry = readdir(dir.get())) {
    if (numbers.size() >= kMaxGpus) break;
    if (entry->d_name[0] == '.') continue;
    const auto minor = device_minor(proc_dir + "/" + entry->d_name + "/information");
    std::string bus_id = entry->d_name;
    std::transform(bus_id.begin(), bus_id.end(), bus_id.begin(), [](unsigned char c) { return std::tolower(c); });
    if (minor) numbers.emplace_back(std::move(bus_id), *minor);
  }
  std::sort(numbers.begin(), numbers.end());
  return numbers;
}

// Probed by a child process whose environment has none of hwloc's overrides: the child's environment can change
// without another thread of the caller (slurmstepd) reading it. A probe that hangs (a sysfs read stuck in a driver)
// or crashes costs the caller `deadline`, then an error.
std::string system_topology_xml(std::chrono::milliseconds deadline) {
  const ChildOutcome outcome =
      run_in_child(probe_without_overrides, deadline, kMaxExportBytes, "cannot probe this system's topology");
  if (outcome.end == ChildOutcome::End::TimedOut) {
    throw Error("hwloc's probe of this system's topology did not end within " + seconds_text(deadline) +
                " (a device or driver that does not answer?)");
  }
  if (outcome.end == ChildOutcome::End::Died || outcome.answer.empty()) {
    throw Error("hwloc's probe of this system's topology ended without a result (" +
                (outcome.death.empty() ? std::string("no answer") : outcome.death) + ")");
  }
  if (outcome.answer[0] == 'E') throw Error(outcome.answer.substr(1));
  return outcome.answer.substr(1);
}

namespace {

// The hardware of this system from an export of its topology: hwloc's view, and the driver's device numbers.
NodeHardware this_system_hardware(hwloc_topology_t exported, const std::string& source) {
  NodeHardware hw = Inventory(exported).take(source);
  hw.this_system = true;
  apply_driver_device_numbers(hw);
  return hw;
}

}  // namespace

NodeHardware load_system_hardware_from(const std::string& exported) {
  const TopologyPtr topology = load_topology(exported, true);
  return this_system_hardware(topology.get(), "this system (" + exported + ")");
}

NodeHardware load_this_system(std::chrono::milliseconds deadline) {
  const std::string xml = system_topology_xml(deadline);
  const TopologyPtr topology = configured_topology(true);
  errno = 0;
  if (hwloc_topology_set_xmlbuffer(topology.get(), xml.c_str(), static_cast<int>(xml.size() + 1)) != 0 ||
      hwloc_topology_load(topology.get()) != 0) {
    throw Error("hwloc cannot read its own export of this system's topology: " + system_error_text());
  }
  return this_system_hardware(topology.get(), "this system");
}

NodeHardware load_node_hardware(const std::optional<std::string>& xml_path) {
  std::optional<std::string> file = xml_path;
  if (!file) {
    const char* from_environment = std::getenv("HWLOC_XMLFILE");
    if (from_environment != nullptr && *from_environment != '\0') file = from_environment;
  }
  const TopologyPtr topology = load_topology(file);
  NodeHardware hw = Inventory(topology.get()).take(file ? *file : "this system");
  hw.this_system = hwloc_topology_is_thissystem(topology.get()) != 0;
  if (hw.this_system) apply_driver_device_numbers(hw);
  return hw;
}

}  // namespace ddp
