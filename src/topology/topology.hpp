#pragma once
// What the plugin needs to know about a node's hardware, read once per node from hwloc (the running system or
// an XML export) and kept as plain values: GPUs (NVIDIA or AMD, found as gpus.hpp says), network interfaces,
// RDMA devices, cores, and how close each GPU is to each device. hwloc itself stays inside topology.cpp; nothing
// here holds hwloc objects.
//
// The first topology read sets HWLOC_PLUGINS_PATH in the process environment (unless it is set) and never unsets
// it: hwloc would otherwise load all its plugins on every read, and the environment is not thread-safe in
// slurmstepd, so it is written once, not set and removed around each read (topology.cpp says more).
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "topology/gpus.hpp"

namespace ddp {

// How far apart two devices are, by where their paths from the CPUs meet; best first. The names are those of
// `nvidia-smi topo -m` and NCCL, plus PKG for the step those two fold into SYS.
enum class Closeness : uint8_t {
  Pix,      // behind one PCIe switch: each device at most one bridge below the bridge where the paths meet
  Pxb,      // behind a tree of PCIe switches, without going through the host bridge
  Phb,      // under one PCIe host bridge (root complex)
  Node,     // under different host bridges of one NUMA node
  Package,  // different NUMA nodes of one package (SNC, NPS, Threadripper dies); NCCL and nvidia-smi say SYS
  System,   // different packages: across the socket interconnect
};
const char* to_string(Closeness closeness);  // "PIX", "PXB", "PHB", "NODE", "PKG", "SYS"

// Devices of one node are named by their index in NodeHardware's vectors.
using DeviceIndex = size_t;

struct Gpu {
  std::string pci_bus_id;  // "0000:10:1c.0"
  std::string model;       // the PCI database name, e.g. "GA100 [A100 SXM4 40GB]"; may be empty
  GpuVendor vendor = GpuVendor::Nvidia;
  // The number Slurm's gres/gpu lists in SLURM_STEP_GPUS: NVIDIA's N of /dev/nvidiaN (from the driver, else bus
  // order); AMD's ROCm SMI index (gpus.hpp).
  unsigned device_number = 0;
  size_t locality = 0;              // into NodeHardware::localities: the CPUs nearest to the GPU
  std::optional<unsigned> package;  // logical index of the package (socket) holding them; nullopt: the machine
  std::vector<Closeness> to_gpu;    // per NodeHardware::gpus (to itself: PIX)
  std::vector<Closeness> to_net;    // per NodeHardware::nets
  std::vector<Closeness> to_rdma;   // per NodeHardware::rdma
  std::optional<DeviceIndex> nic;   // the closest network interface, spread over equally close ones
  std::optional<DeviceIndex> hca;   // the closest RDMA device, likewise
};

struct NetInterface {
  std::string name;                 // the kernel's interface name: what NCCL_SOCKET_IFNAME takes
  std::string pci_bus_id;           // empty for an interface hwloc found outside PCI
  std::optional<DeviceIndex> rdma;  // the RDMA device on the same PCI function: this is its IPoIB interface
};

enum class RdmaKind : uint8_t {
  InfiniBand,  // verbs HCA on an InfiniBand link (PCI class 0x0207): mlx5_*
  RoCE,        // verbs HCA on an Ethernet link
  Efa,         // AWS Elastic Fabric Adapter (vendor 0x1d0f): rdmap*; NCCL reaches it through aws-ofi-nccl
  Other,       // any other verbs device (Omni-Path, iWARP...)
};
const char* to_string(RdmaKind kind);

struct RdmaDevice {
  std::string name;  // mlx5_0, rdmap16s27
  std::string pci_bus_id;
  RdmaKind kind = RdmaKind::Other;
};

// A set of CPUs some device or memory is local to.
struct Locality {
  std::vector<unsigned> cpus;  // OS CPU (PU) ids, sorted
  std::vector<size_t> cores;   // into NodeHardware::cores: the cores with a CPU in `cpus`
};

struct NumaNode {
  unsigned os_index = 0;
  size_t locality = 0;             // into NodeHardware::localities
  std::optional<DeviceIndex> nic;  // closest network interface to these CPUs (for tasks without a GPU)
  std::optional<Closeness> nic_closeness;
  std::optional<DeviceIndex> hca;
  std::optional<Closeness> hca_closeness;
};

struct NodeHardware {
  std::string source;        // "this system" or the XML file read
  bool this_system = false;  // read from the running machine: its interfaces and affinity are the real ones
  unsigned packages = 0;
  unsigned pus = 0;
  // Cores in hwloc's logical order, which is Slurm's core numbering (S_STEP_ALLOC_CORES); each with its OS CPU ids.
  std::vector<std::vector<unsigned>> cores;
  // The GPUs tasks are planned for, all of gpu_vendor, in its runtime's numbering (gpus.hpp): index g is
  // cuda:g with CUDA_DEVICE_ORDER=PCI_BUS_ID, or ROCm's device g.
  std::vector<Gpu> gpus;
  std::optional<GpuVendor> gpu_vendor;      // nullopt: no GPU
  std::vector<std::string> unplanned_gpus;  // PCI bus ids of another vendor's GPUs on a mixed node
  std::vector<NetInterface> nets;           // in PCI bus order, interfaces outside PCI last
  std::vector<RdmaDevice> rdma;             // in PCI bus order
  std::vector<NumaNode> numa_nodes;         // in OS index order
  std::vector<Locality> localities;         // distinct; shared by GPUs and NUMA nodes with the same CPUs
};

// Reads the topology of `xml_path`, else of $HWLOC_XMLFILE when set, else of the running system, with its
// I/O devices: for the tools a user runs (ddp-topo, ddp-doctor). On the running system the whole machine is read,
// even CPUs this process may not use, so core numbers match Slurm's, and GPU device numbers come from the NVIDIA
// driver (/proc/driver/nvidia/gpus) when it is loaded, else from PCI bus order. Throws ddp::Error naming the file
// or hwloc's failure.
NodeHardware load_node_hardware(const std::optional<std::string>& xml_path = std::nullopt);

// The running system, whatever the process environment holds: the plugin's topology, which must never be a file
// someone names. hwloc itself reads HWLOC_XMLFILE, HWLOC_SYNTHETIC, HWLOC_FSROOT, HWLOC_CPUID_PATH and
// HWLOC_COMPONENTS from the environment of the process that loads a topology, and has no call to ignore them, so a
// child process without them probes the system and hands it over as XML (a fork and an XML import more than a
// probe in place), which must answer within `deadline`. Throws ddp::Error with hwloc's failure, or the deadline.
inline constexpr std::chrono::milliseconds kTopologyDeadline{30000};
NodeHardware load_this_system(std::chrono::milliseconds deadline = kTopologyDeadline);

// The running system's topology as load_this_system() reads it, as hwloc XML (the same child, the same deadline),
// and an export read back as this system (CPU binding and driver device numbers apply): reading the XML costs a
// fraction of probing sysfs again (topology_cache.hpp).
std::string system_topology_xml(std::chrono::milliseconds deadline = kTopologyDeadline);
NodeHardware load_system_hardware_from(const std::string& exported);

// The /dev/nvidiaN number of each GPU the NVIDIA driver lists under `proc_dir`, by PCI bus id ("Device Minor:"
// of each `information` file). Empty when the driver is not loaded. Bounded: one small read per GPU directory.
std::vector<std::pair<std::string, unsigned>> read_nvidia_device_numbers(
    const std::string& proc_dir = "/proc/driver/nvidia/gpus");

}  // namespace ddp
