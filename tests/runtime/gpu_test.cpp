// The GPU paths of the runtime (NCCL, CUDA tensors, snapshots of GPU state), on every build: what needs no GPU is
// checked everywhere, including a CUDA LibTorch on a machine without one (CI's build-debian13-nccl); what needs a
// GPU skips, saying so, unless the build has NCCL and a GPU is visible.
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Functions.h>
#include <torch/cuda.h>
#include <torch/nn/modules/linear.h>

#include <chrono>
#include <functional>
#include <string>

#include "core/error.hpp"
#include "core/launch.hpp"
#include "ddp_runtime/common/c10d_compat.hpp"
#include "ddp_runtime/distributed/distributed_model.hpp"
#include "ddp_runtime/distributed/process_group.hpp"
#include "ddp_runtime/snapshots/snapshot.hpp"
#include "test_common.hpp"
#include "test_support.hpp"

namespace ddp::runtime {
namespace {

using ddp::testing::contains;
using ddp::testing::error_of;

// Empty where NCCL is built and a GPU is visible, else why a test that needs both is skipped.
std::string why_no_gpu() {
  if (!compat::nccl_built()) return "the NCCL backend is not built (LibTorch without CUDA, or no nccl.h)";
  if (!torch::cuda::is_available()) return "no CUDA device is visible";
  return "";
}

TEST(RankDevice, NcclTrainsOnTheGpuOfItsLocalRankAmongTheVisibleOnes) {
  EXPECT_EQ(device_for("nccl", 0, 4), c10::Device(c10::kCUDA, 0));
  EXPECT_EQ(device_for("nccl", 3, 4), c10::Device(c10::kCUDA, 3));
  // More ranks than GPUs on the node: they share them round-robin.
  EXPECT_EQ(device_for("nccl", 5, 4), c10::Device(c10::kCUDA, 1));
  // srun --gpus-per-task=1: every task sees its own GPU as device 0, whatever its local rank.
  EXPECT_EQ(device_for("nccl", 2, 1), c10::Device(c10::kCUDA, 0));
}

TEST(RankDevice, GlooAndMpiTrainOnTheCpuWhateverTheGpus) {
  EXPECT_EQ(device_for("gloo", 1, 4), c10::Device(c10::kCPU));
  EXPECT_EQ(device_for("mpi", 0, 0), c10::Device(c10::kCPU));
}

TEST(RankDevice, NcclWithoutAVisibleGpuIsRefusedNamingGloo) {
  const std::string message = error_of([] { device_for("nccl", 0, 0); });
  EXPECT_TRUE(contains(message, "no CUDA device is visible")) << message;
  EXPECT_TRUE(contains(message, "--backend gloo")) << message;
}

TEST(BackendChoice, AutoIsNcclWhereItIsBuiltAndAGpuIsVisibleElseGloo) {
  const Distributed dist = init_distributed(Launch{}, Backend::Auto, std::chrono::seconds(10));
  if (why_no_gpu().empty()) {
    EXPECT_EQ(dist.backend, "nccl");
    EXPECT_EQ(dist.device, c10::Device(c10::kCUDA, 0));
  } else {
    EXPECT_EQ(dist.backend, "gloo");
    EXPECT_EQ(dist.device, c10::Device(c10::kCPU));
  }
}

// At once, before the rendezvous: a store that is never there must not be waited for.
TEST(BackendChoice, NcclWithoutNcclOrAGpuIsRefusedBeforeTheRendezvousNamingTheFix) {
  if (why_no_gpu().empty()) GTEST_SKIP() << "NCCL is built and a GPU is visible: nccl is a valid choice here";
  Launch launch;
  launch.source = LaunchSource::Torchrun;
  launch.rank = 1;
  launch.world_size = 2;
  launch.master_addr = "127.0.0.1";
  launch.master_port = 1;  // nothing listens there
  const auto start = std::chrono::steady_clock::now();
  const std::string message = error_of([&] { init_distributed(launch, Backend::Nccl, std::chrono::seconds(30)); });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_TRUE(contains(message, compat::nccl_built() ? "no CUDA device is visible" : "NCCL backend is not built"))
      << message;
  EXPECT_TRUE(contains(message, "gloo")) << message;
}

// A single rank over NCCL: the Reducer averages over one rank, so the gradients are the local ones, on the GPU.
TEST(CudaTensors, GoThroughTheReducerAndTheSmallCollectivesOverNccl) {
  if (const std::string why = why_no_gpu(); !why.empty()) GTEST_SKIP() << why;
  const Distributed dist = init_distributed(Launch{}, Backend::Nccl, std::chrono::seconds(30));
  ASSERT_EQ(dist.device, c10::Device(c10::kCUDA, 0));
  at::manual_seed(3);
  torch::nn::Linear reference(8, 2);
  torch::nn::Linear model(8, 2);
  model->weight.data().copy_(reference->weight.data());
  model->bias.data().copy_(reference->bias.data());
  model->to(dist.device);
  DistributedModel ddp(model.ptr(), dist);
  const at::Tensor x = at::rand({16, 8});
  const at::Tensor y = at::rand({16, 2});
  at::mse_loss(ddp.forward([&] { return model->forward(x.to(dist.device)); }), y.to(dist.device)).backward();
  at::mse_loss(reference->forward(x), y).backward();
  ASSERT_TRUE(model->weight.grad().is_cuda());
  EXPECT_TRUE(at::allclose(model->weight.grad().cpu(), reference->weight.grad(), 1e-5, 1e-6));
  EXPECT_TRUE(at::allclose(model->bias.grad().cpu(), reference->bias.grad(), 1e-5, 1e-6));

  at::Tensor sum = at::tensor({2.5});
  all_reduce_sum(dist, sum);
  EXPECT_EQ(sum.item<double>(), 2.5);
  EXPECT_EQ(broadcast_string(dist, "from rank 0"), "from rank 0");
}

SnapshotContent gpu_content(float fill) {
  SnapshotContent c;
  c.model_state = {{"weight", at::full({64, 32}, fill).cuda()}, {"bias", at::arange(64, at::kFloat).cuda()}};
  OptimizerState o;
  o.lr = 0.1;
  o.per_param = {{{"momentum_buffer", at::full({64, 32}, 0.5f).cuda()}}, {}};
  c.optimizer = o;
  c.rng_state = at::detail::getDefaultCPUGenerator().get_state();
  c.progress = {1, 0, 4, 5, 1, 16};
  c.run_id = "gpu";
  return c;
}

// torch.load on a machine without a GPU refuses a tensor pickled with location "cuda:0".
void expect_cpu_snapshot(const std::string& path, float fill) {
  EXPECT_FALSE(contains(testing::read_text(path), "cuda")) << path << " names a CUDA device";
  const SnapshotContent read = read_snapshot(path);
  EXPECT_TRUE(at::equal(read.model_state[0].second, at::full({64, 32}, fill)));
  EXPECT_TRUE(at::equal(read.optimizer->per_param[0][0].second, at::full({64, 32}, 0.5f)));
}

TEST(CudaSnapshots, AreWrittenAsCpuTensorsWhetherSavedAtOnceOrStagedInTheBackground) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device is visible (or LibTorch has no CUDA)";
  SnapshotStore store(testing::make_temp_dir(), 3, "gpu", [](const std::string&) {});
  expect_cpu_snapshot(store.save(gpu_content(1.0f)), 1.0f);
  write_model_file(store.dir() + "/final.pt", gpu_content(3.0f).model_state);
  EXPECT_FALSE(contains(testing::read_text(store.dir() + "/final.pt"), "cuda"));

  // The background copy goes through pinned staging buffers: the live GPU state changes right after it.
  SnapshotContent live = gpu_content(2.0f);
  live.progress.global_step = 5;
  std::string saved;
  store.save_async(live, [&](const std::string& path) { saved = path; });
  store.before_update();
  live.model_state[0].second.fill_(-1.0f);
  store.wait();
  ASSERT_FALSE(saved.empty());
  expect_cpu_snapshot(saved, 2.0f);
}

}  // namespace
}  // namespace ddp::runtime
