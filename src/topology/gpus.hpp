#pragma once
// Which PCI functions of a node are GPUs a training task can use, of which vendor, and how the vendor's runtime
// numbers them: the one definition for the binding plan (topology.cpp reads the PCI functions through hwloc) and
// for ddp-doctor (which reads them from sysfs, without hwloc).
//  * NVIDIA: vendor 0x10de, PCI class 0x03xx (VGA, 3D, other display). Its NVSwitches (0x0680) are not GPUs.
//  * AMD: vendor 0x1002 (AMD's graphics vendor id; 0x1022 is its chipsets and CPUs) with class 0x03xx or 0x12xx
//    (processing accelerator, as MI300 reports), or any 0x1002 function under which hwloc found a ROCm SMI
//    (rsmiN) or OpenCL GPU device. The HDMI audio functions of those cards (class 0x0403) are not GPUs.
//  * Numbering: NVIDIA's in PCI bus order, what CUDA uses with CUDA_DEVICE_ORDER=PCI_BUS_ID (the plugin sets it).
//    AMD's in ROCm SMI's order, which Slurm's AutoDetect=rsmi numbers its gres by and writes into
//    ROCR_VISIBLE_DEVICES: current ROCm SMI sorts by PCI bus id; older releases counted in driver probe order,
//    which hwloc records as the N of rsmiN where its ROCm SMI plugin ran (the saved MI50 node shows both
//    differ there). So: rsmiN where every AMD GPU has a distinct one, else bus order.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ddp {

enum class GpuVendor : uint8_t { Nvidia, Amd };
const char* to_string(GpuVendor vendor);  // "NVIDIA", "AMD"
// The variable that lists the GPUs a task may use, which Slurm's gres/gpu sets: CUDA_VISIBLE_DEVICES for NVIDIA,
// ROCR_VISIBLE_DEVICES (read by ROCm's runtime, below HIP) for AMD.
const char* visible_devices_variable(GpuVendor vendor);

struct PciFunction {
  std::string bus_id;                  // "0000:07:00.0", lower-case hex
  unsigned vendor_id = 0;              // 0x10de
  unsigned class_id = 0;               // class and subclass: 0x0302
  std::string driver;                  // the bound kernel driver (sysfs only); empty: none or not known
  std::optional<unsigned> rsmi_index;  // N of an rsmiN OS device hwloc found under the function
  bool opencl_gpu = false;             // hwloc found an OpenCL GPU device under the function
};

std::optional<GpuVendor> gpu_vendor(const PciFunction& function);

struct GpuDevice {
  PciFunction pci;
  GpuVendor vendor = GpuVendor::Nvidia;
  unsigned index = 0;  // in the vendor runtime's numbering (see above)
};

// The GPUs among `functions`: NVIDIA's first, then AMD's, each vendor's by index.
std::vector<GpuDevice> enumerate_gpus(const std::vector<PciFunction>& functions);

// The vendor a node's tasks are planned for: the one with more GPUs, NVIDIA on a tie; nullopt without GPUs.
// (A node mixing vendors is a workstation with a display card beside a compute card; PyTorch is built for one.)
std::optional<GpuVendor> planned_vendor(const std::vector<GpuDevice>& gpus);

// The PCI functions under `sysfs_root`/bus/pci/devices: vendor, class and bound driver, in bus order. Empty when
// the directory cannot be read. Bounded: at most a few small reads per function and 4096 functions.
std::vector<PciFunction> read_pci_functions(const std::string& sysfs_root = "/sys");

}  // namespace ddp
