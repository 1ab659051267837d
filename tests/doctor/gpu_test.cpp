#include "doctor/checks/gpu.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "test_support.hpp"

namespace ddp::doctor {
namespace {

using testing::contains;
using testing::TempDir;
using testing::write_file;

// A PCI device directory as sysfs shows it, with its driver link when `driver` is given.
void add_pci_device(const TempDir& sysfs, const std::string& bus_id, const std::string& vendor,
                    const std::string& pci_class, const std::string& driver) {
  const std::string dir = sysfs / ("bus/pci/devices/" + bus_id);
  write_file(dir + "/vendor", vendor + "\n");
  write_file(dir + "/class", pci_class + "\n");
  if (!driver.empty()) {
    std::filesystem::create_directories(sysfs / ("bus/pci/drivers/" + driver));
    std::filesystem::create_directory_symlink("../../../bus/pci/drivers/" + driver, dir + "/driver");
  }
}

class FakeSysfs : public ::testing::Test {
 protected:
  void SetUp() override {
    add_pci_device(sysfs_, "0000:c7:00.0", "0x10de", "0x030200", "nvidia");         // A100: 3D controller
    add_pci_device(sysfs_, "0000:07:00.0", "0x10de", "0x030000", "nouveau");        // VGA, wrong driver
    add_pci_device(sysfs_, "0000:07:00.1", "0x10de", "0x040300", "snd_hda_intel");  // the GPU's HDMI audio
    add_pci_device(sysfs_, "0000:00:02.0", "0x8086", "0x030000", "i915");           // an Intel GPU
    add_pci_device(sysfs_, "0000:10:00.0", "0x10de", "0x030200", "");               // no driver bound
    add_pci_device(sysfs_, "0000:20:00.0", "0x15b3", "0x020700", "mlx5_core");      // a ConnectX HCA
  }
  TempDir sysfs_;
};

TEST_F(FakeSysfs, FindsNvidiaDisplayAndComputeDevicesOnlySortedByBusId) {
  const NodeGpus node = scan_gpus(sysfs_.path());
  EXPECT_EQ(node.vendor, GpuVendor::Nvidia);
  EXPECT_STREQ(node.visible_variable(), "CUDA_VISIBLE_DEVICES");
  ASSERT_EQ(node.gpus.size(), 3u);
  EXPECT_EQ(node.gpus[0].pci.bus_id, "0000:07:00.0");
  EXPECT_EQ(node.gpus[0].pci.driver, "nouveau");
  EXPECT_EQ(node.gpus[1].pci.bus_id, "0000:10:00.0");
  EXPECT_EQ(node.gpus[1].pci.driver, "");
  EXPECT_EQ(node.gpus[2].pci.bus_id, "0000:c7:00.0");
  EXPECT_EQ(node.gpus[2].pci.driver, "nvidia");
  EXPECT_EQ(node.gpus[2].index, 2u);
}

TEST_F(FakeSysfs, DriverCheckNamesEveryGpuWithoutTheNvidiaDriver) {
  const auto result = check_gpu_drivers(scan_gpus(sysfs_.path()));
  EXPECT_EQ(result.status, Status::Fail);
  EXPECT_EQ(result.value, "1 of 3 on nvidia");
  EXPECT_TRUE(contains(result.detail, "0000:07:00.0 (nouveau), 0000:10:00.0 (none)"));
}

TEST(GpuScan, AmdAcceleratorsAndDisplaysAreGpusTheirAudioIsNot) {
  TempDir sysfs;
  add_pci_device(sysfs, "0000:05:00.0", "0x1002", "0x120000", "amdgpu");         // MI300X: processing accelerator
  add_pci_device(sysfs, "0000:26:00.0", "0x1002", "0x038000", "amdgpu");         // MI50: display controller
  add_pci_device(sysfs, "0000:26:00.1", "0x1002", "0x040300", "snd_hda_intel");  // its HDMI audio
  add_pci_device(sysfs, "0000:00:18.0", "0x1022", "0x060000", "");               // an AMD host bridge: CPU, not GPU
  add_pci_device(sysfs, "0000:46:00.0", "0x1002", "0x120000", "vfio-pci");       // handed to a VM
  const NodeGpus node = scan_gpus(sysfs.path());
  EXPECT_EQ(node.vendor, GpuVendor::Amd);
  EXPECT_STREQ(node.visible_variable(), "ROCR_VISIBLE_DEVICES");
  ASSERT_EQ(node.gpus.size(), 3u);
  EXPECT_EQ(node.gpus[1].pci.bus_id, "0000:26:00.0");
  const auto drivers = check_gpu_drivers(node);
  EXPECT_EQ(drivers.status, Status::Fail);
  EXPECT_EQ(drivers.value, "2 of 3 on amdgpu");
  EXPECT_TRUE(contains(drivers.detail, "0000:46:00.0 (vfio-pci)")) << drivers.detail;
  const auto visible = check_visible_gpus(node, std::string("0,3"), true);
  EXPECT_EQ(visible.status, Status::Fail);
  EXPECT_TRUE(contains(visible.detail, "GPU 3 does not exist: this node has 3 AMD GPU(s)")) << visible.detail;
  EXPECT_TRUE(contains(visible.value, "ROCR_VISIBLE_DEVICES='0,3'")) << visible.value;
}

TEST(GpuScan, NoPciTreeMeansNoGpusAndASkip) {
  TempDir empty;
  const NodeGpus none = scan_gpus(empty.path());
  EXPECT_TRUE(none.gpus.empty());
  EXPECT_FALSE(none.vendor);
  EXPECT_EQ(check_gpu_drivers(none).status, Status::Skip);
}

TEST(VisibleDevices, ReadLikeTheCudaRuntime) {
  EXPECT_TRUE(parse_visible_devices(std::nullopt).all);
  EXPECT_TRUE(parse_visible_devices(std::string("")).entries.empty());
  EXPECT_TRUE(parse_visible_devices(std::string("NoDevFiles")).entries.empty());
  const auto mixed = parse_visible_devices(std::string("2,GPU-8f6b1c3e-1111,0"));
  EXPECT_EQ(mixed.entries, (std::vector<std::string>{"2", "GPU-8f6b1c3e-1111", "0"}));
  EXPECT_EQ(mixed.ignored, "");
  // CUDA stops at the first entry it cannot read, and at a duplicate.
  const auto broken = parse_visible_devices(std::string("1,x,2"));
  EXPECT_EQ(broken.entries, std::vector<std::string>{"1"});
  EXPECT_EQ(broken.ignored, "x,2");
  EXPECT_EQ(parse_visible_devices(std::string("0,0")).ignored, "0");
}

NodeGpus nvidia_node(size_t gpus) {
  NodeGpus node;
  if (gpus > 0) node.vendor = GpuVendor::Nvidia;
  for (size_t i = 0; i < gpus; ++i) node.gpus.push_back({{}, GpuVendor::Nvidia, static_cast<unsigned>(i)});
  return node;
}

TEST(VisibleDevices, VerdictsAgainstTheNodesGpus) {
  const auto all = check_visible_gpus(nvidia_node(8), std::nullopt, true);
  EXPECT_EQ(all.status, Status::Ok);
  EXPECT_EQ(all.value, "8 of 8 usable");
  EXPECT_EQ(check_visible_gpus(nvidia_node(8), std::string("4,5"), true).value, "2 of 8 usable");

  const auto missing = check_visible_gpus(nvidia_node(4), std::string("0,4"), false);
  EXPECT_EQ(missing.status, Status::Fail);
  EXPECT_TRUE(contains(missing.detail, "GPU 4 does not exist: this node has 4 NVIDIA GPU(s)"));

  const auto garbled = check_visible_gpus(nvidia_node(4), std::string("0,,1"), false);
  EXPECT_EQ(garbled.status, Status::Fail);
  EXPECT_TRUE(contains(garbled.detail, "CUDA stops reading at ',1'"));

  const auto hidden = check_visible_gpus(nvidia_node(8), std::string(""), false);
  EXPECT_EQ(hidden.status, Status::Warn);
  EXPECT_TRUE(contains(hidden.detail, "--gres=gpu:N"));
  EXPECT_EQ(check_visible_gpus(nvidia_node(8), std::string(""), true).status, Status::Fail);

  // A CPU node is fine for Gloo, not for NCCL.
  EXPECT_EQ(check_visible_gpus(nvidia_node(0), std::nullopt, false).status, Status::Ok);
  const auto nccl_on_cpu = check_visible_gpus(nvidia_node(0), std::nullopt, true);
  EXPECT_EQ(nccl_on_cpu.status, Status::Fail);
  EXPECT_TRUE(contains(nccl_on_cpu.detail, "this node has no GPU, but the backend is nccl"));
}

}  // namespace
}  // namespace ddp::doctor
