#include "doctor/gpu.hpp"

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
    add_pci_device(sysfs_, "0000:c7:00.0", "0x10de", "0x030200", "nvidia");   // A100: 3D controller
    add_pci_device(sysfs_, "0000:07:00.0", "0x10de", "0x030000", "nouveau");  // VGA, wrong driver
    add_pci_device(sysfs_, "0000:07:00.1", "0x10de", "0x040300", "snd_hda_intel");  // the GPU's HDMI audio
    add_pci_device(sysfs_, "0000:00:02.0", "0x8086", "0x030000", "i915");     // an Intel GPU
    add_pci_device(sysfs_, "0000:10:00.0", "0x10de", "0x030200", "");         // no driver bound
    add_pci_device(sysfs_, "0000:20:00.0", "0x15b3", "0x020700", "mlx5_core"); // a ConnectX HCA
  }
  TempDir sysfs_;
};

TEST_F(FakeSysfs, FindsNvidiaDisplayAndComputeDevicesOnlySortedByBusId) {
  const auto gpus = scan_nvidia_gpus(sysfs_.path());
  ASSERT_EQ(gpus.size(), 3u);
  EXPECT_EQ(gpus[0].bus_id, "0000:07:00.0");
  EXPECT_EQ(gpus[0].driver, "nouveau");
  EXPECT_EQ(gpus[1].bus_id, "0000:10:00.0");
  EXPECT_EQ(gpus[1].driver, "");
  EXPECT_EQ(gpus[2].bus_id, "0000:c7:00.0");
  EXPECT_EQ(gpus[2].driver, "nvidia");
}

TEST_F(FakeSysfs, DriverCheckNamesEveryGpuWithoutTheNvidiaDriver) {
  const auto result = check_gpu_drivers(scan_nvidia_gpus(sysfs_.path()));
  EXPECT_EQ(result.status, Status::Fail);
  EXPECT_EQ(result.value, "1 of 3 on nvidia");
  EXPECT_TRUE(contains(result.detail, "0000:07:00.0 (nouveau), 0000:10:00.0 (none)"));
}

TEST(GpuScan, NoPciTreeMeansNoGpusAndASkip) {
  TempDir empty;
  EXPECT_TRUE(scan_nvidia_gpus(empty.path()).empty());
  EXPECT_EQ(check_gpu_drivers({}).status, Status::Skip);
  EXPECT_EQ(check_gpu_drivers({{"0000:c7:00.0", "nvidia"}}).status, Status::Ok);
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

TEST(VisibleDevices, VerdictsAgainstTheNodesGpus) {
  const auto all = check_visible_gpus(8, std::nullopt, true);
  EXPECT_EQ(all.status, Status::Ok);
  EXPECT_EQ(all.value, "8 of 8 usable");
  EXPECT_EQ(check_visible_gpus(8, std::string("4,5"), true).value, "2 of 8 usable");

  const auto missing = check_visible_gpus(4, std::string("0,4"), false);
  EXPECT_EQ(missing.status, Status::Fail);
  EXPECT_TRUE(contains(missing.detail, "GPU 4 does not exist: this node has 4 NVIDIA GPU(s)"));

  const auto garbled = check_visible_gpus(4, std::string("0,,1"), false);
  EXPECT_EQ(garbled.status, Status::Fail);
  EXPECT_TRUE(contains(garbled.detail, "CUDA stops reading at ',1'"));

  const auto hidden = check_visible_gpus(8, std::string(""), false);
  EXPECT_EQ(hidden.status, Status::Warn);
  EXPECT_TRUE(contains(hidden.detail, "--gres=gpu:N"));
  EXPECT_EQ(check_visible_gpus(8, std::string(""), true).status, Status::Fail);

  // A CPU node is fine for Gloo, not for NCCL.
  EXPECT_EQ(check_visible_gpus(0, std::nullopt, false).status, Status::Ok);
  const auto nccl_on_cpu = check_visible_gpus(0, std::nullopt, true);
  EXPECT_EQ(nccl_on_cpu.status, Status::Fail);
  EXPECT_TRUE(contains(nccl_on_cpu.detail, "this node has no NVIDIA GPU, but the backend is nccl"));
}

}  // namespace
}  // namespace ddp::doctor
