// The GPU enumeration shared by the plan and ddp-doctor (gpus.hpp), on PCI functions written out here; the
// readers are tested with their sources (topology_test: hwloc; doctor/gpu_test: sysfs).
#include "topology/gpus.hpp"

#include <gtest/gtest.h>

namespace ddp {
namespace {

PciFunction function(const std::string& bus_id, unsigned vendor, unsigned pci_class,
                     std::optional<unsigned> rsmi = std::nullopt) {
  PciFunction f;
  f.bus_id = bus_id;
  f.vendor_id = vendor;
  f.class_id = pci_class;
  f.rsmi_index = rsmi;
  return f;
}

std::vector<std::string> bus_ids(const std::vector<GpuDevice>& gpus) {
  std::vector<std::string> out;
  for (const GpuDevice& gpu : gpus) out.push_back(gpu.pci.bus_id);
  return out;
}

TEST(Gpus, VendorsAndClasses) {
  EXPECT_EQ(gpu_vendor(function("0000:10:1c.0", 0x10de, 0x0302)), GpuVendor::Nvidia);  // A100: 3D
  EXPECT_EQ(gpu_vendor(function("0000:01:00.0", 0x10de, 0x0300)), GpuVendor::Nvidia);  // GeForce: VGA
  EXPECT_FALSE(gpu_vendor(function("0000:c0:00.0", 0x10de, 0x0680)));                  // NVSwitch: bridge
  EXPECT_FALSE(gpu_vendor(function("0000:01:00.1", 0x10de, 0x0403)));                  // HDMI audio
  EXPECT_EQ(gpu_vendor(function("0000:05:00.0", 0x1002, 0x1200)), GpuVendor::Amd);     // MI300X: accelerator
  EXPECT_EQ(gpu_vendor(function("0000:03:00.0", 0x1002, 0x0380)), GpuVendor::Amd);     // MI50: display
  EXPECT_FALSE(gpu_vendor(function("0000:03:00.1", 0x1002, 0x0403)));                  // its HDMI audio
  EXPECT_FALSE(gpu_vendor(function("0000:00:18.0", 0x1022, 0x0600)));                  // AMD CPU host bridge
  EXPECT_FALSE(gpu_vendor(function("0000:65:00.0", 0x1a03, 0x0300)));                  // ASPEED BMC VGA
  // An AMD function under which hwloc found a ROCm SMI or OpenCL GPU device is a GPU whatever its class says.
  PciFunction odd = function("0000:07:00.0", 0x1002, 0x0b40, 3);
  EXPECT_EQ(gpu_vendor(odd), GpuVendor::Amd);
  odd.rsmi_index.reset();
  EXPECT_FALSE(gpu_vendor(odd));
  odd.opencl_gpu = true;
  EXPECT_EQ(gpu_vendor(odd), GpuVendor::Amd);
}

TEST(Gpus, NvidiaInBusOrderAmdInRocmSmiOrderWhereEveryGpuHasOne) {
  const std::vector<GpuDevice> gpus =
      enumerate_gpus({function("0000:63:00.0", 0x1002, 0x0380, 0), function("0000:03:00.0", 0x1002, 0x0380, 1),
                      function("0000:c7:00.0", 0x10de, 0x0302), function("0000:07:00.0", 0x10de, 0x0302),
                      function("0000:08:00.0", 0x8086, 0x0200)});
  EXPECT_EQ(bus_ids(gpus), (std::vector<std::string>{"0000:07:00.0", "0000:c7:00.0", "0000:63:00.0", "0000:03:00.0"}));
  EXPECT_EQ(gpus[1].index, 1u);
  EXPECT_EQ(gpus[3].index, 1u);  // rsmi1
  // One AMD GPU without rsmiN (or two with the same N): hwloc's indices are incomplete, bus order is used.
  const std::vector<GpuDevice> partial =
      enumerate_gpus({function("0000:63:00.0", 0x1002, 0x0380, 0), function("0000:03:00.0", 0x1002, 0x0380)});
  EXPECT_EQ(bus_ids(partial), (std::vector<std::string>{"0000:03:00.0", "0000:63:00.0"}));
  EXPECT_EQ(partial[1].index, 1u);
}

TEST(Gpus, ThePlannedVendorHasMoreGpusNvidiaOnATie) {
  EXPECT_FALSE(planned_vendor({}));
  const auto one_each =
      enumerate_gpus({function("0000:08:00.0", 0x10de, 0x0300), function("0000:44:00.0", 0x1002, 0x0300)});
  EXPECT_EQ(planned_vendor(one_each), GpuVendor::Nvidia);
  const auto more_amd =
      enumerate_gpus({function("0000:08:00.0", 0x10de, 0x0300), function("0000:44:00.0", 0x1002, 0x1200),
                      function("0000:45:00.0", 0x1002, 0x1200)});
  EXPECT_EQ(planned_vendor(more_amd), GpuVendor::Amd);
  EXPECT_STREQ(visible_devices_variable(GpuVendor::Amd), "ROCR_VISIBLE_DEVICES");
  EXPECT_STREQ(visible_devices_variable(GpuVendor::Nvidia), "CUDA_VISIBLE_DEVICES");
}

}  // namespace
}  // namespace ddp
