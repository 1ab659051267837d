#include "doctor/checks/rocm_smi.hpp"

#include <gtest/gtest.h>
#include <stdlib.h>

#include "test_support.hpp"

namespace ddp::doctor {
namespace {

using testing::contains;
using testing::find_check;

NodeGpus amd_node(size_t gpus) {
  NodeGpus node;
  node.vendor = GpuVendor::Amd;
  for (size_t i = 0; i < gpus; ++i) node.gpus.push_back({{}, GpuVendor::Amd, static_cast<unsigned>(i)});
  return node;
}

TEST(RocmSmi, ReadsVersionsAndMemoryThroughTheLoadedLibrary) {
  const DriverQuery query = query_rocm_smi(FAKE_ROCM_SMI);
  ASSERT_TRUE(query.report) << query.error;
  EXPECT_TRUE(query.loaded);
  EXPECT_EQ(query.report->versions, "driver 6.10.5, ROCm SMI 7.3.0");
  ASSERT_EQ(query.report->gpus.size(), 2u);
  EXPECT_EQ(query.report->gpus[0].name, "AMD Instinct MI250X");
  EXPECT_EQ(query.report->gpus[1].memory_used, 30ull << 30);
  EXPECT_EQ(query.report->gpus[1].memory_total, 64ull << 30);
}

TEST(RocmSmi, AmdNodeChecksGoThroughRocmSmiNotNvml) {
  // NVML would answer too (the fake one), but the node's GPUs are AMD's: ROCm SMI reports them.
  const GpuLibraries libraries{FAKE_NVML, {"/nonexistent/librocm_smi64.so.1", FAKE_ROCM_SMI}};
  const auto results = check_gpu_libraries(amd_node(2), 2, libraries);
  const CheckResult* driver = find_check(results, "gpu.driver");
  ASSERT_NE(driver, nullptr);
  EXPECT_EQ(driver->status, Status::Ok);
  EXPECT_EQ(driver->value, "driver 6.10.5, ROCm SMI 7.3.0, 2 GPU(s) AMD Instinct MI250X");
  const CheckResult* memory = find_check(results, "gpu.memory");
  ASSERT_NE(memory, nullptr);
  EXPECT_EQ(memory->status, Status::Warn);
  EXPECT_TRUE(contains(memory->detail, "GPU 1 30 GiB of 64 GiB")) << memory->detail;
  EXPECT_TRUE(contains(memory->detail, "rocm-smi --showpids")) << memory->detail;
  // The library seeing fewer GPUs than the task was given: a GPU is lost.
  const auto lost = check_gpu_libraries(amd_node(8), 4, libraries);
  EXPECT_EQ(find_check(lost, "gpu.driver")->status, Status::Fail);
  EXPECT_TRUE(contains(find_check(lost, "gpu.driver")->detail, "sees 2 of the 8 GPUs"));
  EXPECT_TRUE(contains(find_check(lost, "gpu.driver")->detail, "amdgpu"));
}

TEST(RocmSmi, InitFailureIsReportedWithRocmSmisOwnWords) {
  setenv("FAKE_RSMI_INIT_ERROR", "8", 1);
  const DriverQuery query = query_rocm_smi(FAKE_ROCM_SMI);
  unsetenv("FAKE_RSMI_INIT_ERROR");
  EXPECT_FALSE(query.report);
  EXPECT_TRUE(contains(query.error, "rsmi_init: RSMI_STATUS_INIT_ERROR")) << query.error;
  const auto results = check_driver_report(query, GpuVendor::Amd, 4, 4);
  EXPECT_EQ(results.front().status, Status::Fail);
  EXPECT_TRUE(contains(results.front().detail, "this node has 4 AMD GPU(s) but rsmi_init")) << results.front().detail;
}

// AMD GPUs are reported through ROCm SMI when it is installed, and skipped cleanly when not: unlike NVML,
// which NVIDIA's driver installs, ROCm SMI is a package of its own. A library that loads but is not ROCm SMI is a
// broken installation, and fails.
TEST(RocmSmi, AMissingLibraryIsASkipWithOrWithoutGpusAndAForeignOneFails) {
  const DriverQuery missing = query_rocm_smi("/nonexistent/librocm_smi64.so.1");
  EXPECT_FALSE(missing.loaded);
  EXPECT_TRUE(contains(missing.error, "cannot load /nonexistent/librocm_smi64.so.1"));
  EXPECT_EQ(check_driver_report(missing, GpuVendor::Amd, 0, 0).front().status, Status::Skip);
  const auto with_gpus = check_driver_report(missing, GpuVendor::Amd, 2, 2);
  ASSERT_EQ(with_gpus.size(), 1u);
  EXPECT_EQ(with_gpus.front().check, "gpu.driver");
  EXPECT_EQ(with_gpus.front().status, Status::Skip);
  EXPECT_TRUE(contains(with_gpus.front().detail,
                       "this node has 2 AMD GPU(s) but no ROCm SMI library to ask about "
                       "them (cannot load /nonexistent/librocm_smi64.so.1"))
      << with_gpus.front().detail;
  EXPECT_TRUE(contains(with_gpus.front().detail, "install ROCm SMI (rocm-smi-lib)")) << with_gpus.front().detail;
  EXPECT_FALSE(contains(with_gpus.front().detail, "\n")) << with_gpus.front().detail;
  const DriverQuery foreign = query_rocm_smi("libc.so.6");
  EXPECT_TRUE(foreign.loaded);
  EXPECT_FALSE(foreign.report);
  EXPECT_TRUE(contains(foreign.error, "lacks ROCm SMI entry points"));
  EXPECT_EQ(check_driver_report(foreign, GpuVendor::Amd, 2, 2).front().status, Status::Fail);
  // A node without GPUs and without either library: one clean skip.
  const GpuLibraries none{"/nonexistent/libnvidia-ml.so.1", {"/nonexistent/librocm_smi64.so.1"}};
  const auto results = check_gpu_libraries(NodeGpus{}, 0, none);
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results.front().status, Status::Skip);
  EXPECT_TRUE(contains(results.front().detail, "neither NVML nor ROCm SMI")) << results.front().detail;
  // Without GPUs on the bus, whichever library loads reports: here ROCm SMI's.
  const GpuLibraries amd_only{"/nonexistent/libnvidia-ml.so.1", {FAKE_ROCM_SMI}};
  EXPECT_TRUE(contains(find_check(check_gpu_libraries(NodeGpus{}, 0, amd_only), "gpu.driver")->value, "ROCm SMI"));
}

}  // namespace
}  // namespace ddp::doctor
