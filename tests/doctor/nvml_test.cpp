#include "doctor/checks/nvml.hpp"

#include <gtest/gtest.h>
#include <stdlib.h>

#include "test_support.hpp"

namespace ddp::doctor {
namespace {

using testing::contains;
using testing::find_check;

// gpu.driver and gpu.memory of an NVIDIA node with `pci_gpus` on the bus, `usable` of them the task's.
std::vector<CheckResult> check_nvml(const DriverQuery& query, size_t pci_gpus, size_t usable) {
  return check_driver_report(query, GpuVendor::Nvidia, pci_gpus, usable);
}

TEST(Nvml, ReadsVersionsAndMemoryThroughTheLoadedLibrary) {
  const DriverQuery query = query_nvml(FAKE_NVML);
  ASSERT_TRUE(query.report) << query.error;
  EXPECT_TRUE(query.loaded);
  EXPECT_EQ(query.report->versions, "driver 550.54.15, CUDA 12.4");  // NVML says CUDA 12040
  ASSERT_EQ(query.report->gpus.size(), 2u);
  EXPECT_EQ(query.report->gpus[0].name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(query.report->gpus[1].memory_used, 20ull << 30);
  EXPECT_EQ(query.report->gpus[1].memory_total, 80ull << 30);
}

TEST(Nvml, ChecksReportVersionsAndMemoryAlreadyInUse) {
  const auto results = check_nvml(query_nvml(FAKE_NVML), 2, 2);
  const CheckResult* driver = find_check(results, "gpu.driver");
  ASSERT_NE(driver, nullptr);
  EXPECT_EQ(driver->status, Status::Ok);
  EXPECT_EQ(driver->value, "driver 550.54.15, CUDA 12.4, 2 GPU(s) NVIDIA H100 80GB HBM3");
  const CheckResult* memory = find_check(results, "gpu.memory");
  ASSERT_NE(memory, nullptr);
  EXPECT_EQ(memory->status, Status::Warn);
  EXPECT_TRUE(contains(memory->detail, "GPU 1 20 GiB of 80 GiB"));
  EXPECT_FALSE(contains(memory->detail, "GPU 0"));
}

TEST(Nvml, DriverSeeingFewerGpusThanTheTaskShouldUseFails) {
  // 8 on the bus, the task was given 4 and the driver sees only 2: a GPU is lost. Under ConstrainDevices the
  // driver seeing only the 2 the task was given is normal.
  const auto lost = check_nvml(query_nvml(FAKE_NVML), 8, 4);
  EXPECT_EQ(find_check(lost, "gpu.driver")->status, Status::Fail);
  EXPECT_TRUE(contains(find_check(lost, "gpu.driver")->detail, "sees 2 of the 8 GPUs"));
  EXPECT_EQ(find_check(check_nvml(query_nvml(FAKE_NVML), 8, 2), "gpu.driver")->status, Status::Ok);
}

TEST(Nvml, InitFailureIsReportedWithNvmlsOwnWords) {
  setenv("FAKE_NVML_INIT_ERROR", "9", 1);
  const DriverQuery query = query_nvml(FAKE_NVML);
  unsetenv("FAKE_NVML_INIT_ERROR");
  EXPECT_FALSE(query.report);
  EXPECT_EQ(query.error, "nvmlInit: Driver Not Loaded");
  const auto results = check_nvml(query, 4, 4);
  EXPECT_EQ(results.front().status, Status::Fail);
  EXPECT_TRUE(contains(results.front().detail, "this node has 4 NVIDIA GPU(s) but nvmlInit: Driver Not Loaded"));
}

TEST(Nvml, MissingOrForeignLibraryIsASkipWithoutGpus) {
  const DriverQuery missing = query_nvml("/nonexistent/libnvidia-ml.so.1");
  EXPECT_FALSE(missing.report);
  EXPECT_TRUE(contains(missing.error, "cannot load /nonexistent/libnvidia-ml.so.1"));
  EXPECT_EQ(check_nvml(missing, 0, 0).front().status, Status::Skip);
  EXPECT_EQ(check_nvml(missing, 2, 2).front().status, Status::Fail);
  const DriverQuery foreign = query_nvml("libc.so.6");
  EXPECT_FALSE(foreign.report);
  EXPECT_TRUE(contains(foreign.error, "lacks NVML entry points"));
}

}  // namespace
}  // namespace ddp::doctor
