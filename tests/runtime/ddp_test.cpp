// DistributedModel on real processes over Gloo: after N steps on different data two ranks hold identical
// parameters, equal to single-process training on the union of their data; no_sync accumulates locally; a process
// that resumes a run of three averages its first step as the uninterrupted run does.
#include <gtest/gtest.h>

#include <ATen/Functions.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include <cstdlib>
#include <iostream>
#include <optional>

#include "core/launch.hpp"
#include "ddp_runtime/common/error_message.hpp"
#include "ddp_runtime/distributed/distributed_model.hpp"
#include "ddp_runtime/distributed/mpi_bootstrap.hpp"
#include "ddp_runtime/distributed/process_group.hpp"
#include "ddp_runtime/snapshots/snapshot.hpp"
#include "test_common.hpp"
#include "test_support.hpp"

namespace ddp::runtime {
namespace {

constexpr int kRanks = 2;
constexpr int64_t kBatch = 16;
constexpr int kSteps = 6;
constexpr double kLr = 0.1;
constexpr double kMomentum = 0.9;

torch::nn::Sequential test_model(uint64_t seed, int64_t outputs = 1) {
  at::manual_seed(seed);
  return torch::nn::Sequential(torch::nn::Linear(8, 32), torch::nn::ReLU(), torch::nn::Linear(32, 32),
                               torch::nn::ReLU(), torch::nn::Linear(32, outputs));
}

struct Data {
  at::Tensor inputs;
  at::Tensor targets;
};

Data test_data(int accumulate) {
  at::manual_seed(7);
  const int64_t rows = kSteps * accumulate * kRanks * kBatch;
  return {at::rand({rows, 8}), at::rand({rows, 1})};
}

// Rows of one rank's micro-batch: every step holds accumulate x ranks batches, rank-major within a micro-step.
at::Tensor rows(const at::Tensor& all, int accumulate, int step, int micro, int rank) {
  const int64_t start = ((int64_t{step} * accumulate + micro) * kRanks + rank) * kBatch;
  return all.slice(0, start, start + kBatch);
}

at::Tensor step_rows(const at::Tensor& all, int accumulate, int step) {
  const int64_t size = int64_t{accumulate} * kRanks * kBatch;
  return all.slice(0, step * size, (step + 1) * size);
}

int accumulate_setting() { return std::atoi(std::getenv("ACCUMULATE")); }

int train_worker() {
  const int accumulate = accumulate_setting();
  const Launch launch = launch_from_environment(process_environment());
  const Backend backend = launch.backend == Backend::Mpi ? Backend::Mpi : Backend::Gloo;
  const Distributed dist = init_distributed(launch, backend, std::chrono::seconds(60));
  // Different initial weights on every rank: the broadcast from rank 0 must make them equal.
  torch::nn::Sequential model = test_model(100 + dist.rank);
  // Both gradient layouts: copied into the buckets (PyTorch's default) and bucket views (ddp-train's).
  const bool views = std::getenv("BUCKET_VIEWS") != nullptr;
  DistributedModel ddp(model.ptr(), dist, DdpOptions{1024, 256, views});
  std::cout << "buckets=" << ddp.bucket_count() << std::endl;
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(kLr).momentum(kMomentum));
  const Data data = test_data(accumulate);
  at::Tensor local_gradient;
  for (int step = 0; step < kSteps; ++step) {
    zero_gradients(*model);
    for (int micro = 0; micro < accumulate; ++micro) {
      std::optional<DistributedModel::NoSync> no_sync;
      if (micro + 1 < accumulate) no_sync.emplace(ddp);
      const at::Tensor x = rows(data.inputs, accumulate, step, micro, dist.rank);
      const at::Tensor y = rows(data.targets, accumulate, step, micro, dist.rank);
      const at::Tensor output = ddp.forward([&] { return model->forward(x); });
      (at::mse_loss(output, y) / accumulate).backward();
      if (step == 0 && micro == 0) local_gradient = model->parameters()[0].grad().clone();
    }
    optimizer.step();
  }
  std::vector<std::pair<std::string, at::Tensor>> saved;
  for (const auto& item : model->named_parameters()) saved.emplace_back(item.key(), item.value());
  saved.emplace_back("first_gradient", local_gradient);
  write_model_file(std::getenv("OUT") + std::string("/rank") + std::to_string(dist.rank) + ".pt", saved);
  finalize_mpi();
  return 0;
}

// Where a run resumes: a new process, a model holding the uninterrupted run's parameters after kResumeAt steps,
// gradients not made yet, a DistributedModel of its own.
constexpr int kResumeRanks = 3;
constexpr int kResumeAt = 3;

// One synchronised SGD step on rank-local rows `step`; returns the averaged gradients it applied.
std::vector<at::Tensor> sgd_step(torch::nn::Sequential& model, DistributedModel& ddp, torch::optim::SGD& optimizer,
                                 const Data& data, int step) {
  zero_gradients(*model);
  const at::Tensor x = data.inputs.slice(0, step * kBatch, (step + 1) * kBatch);
  const at::Tensor y = data.targets.slice(0, step * kBatch, (step + 1) * kBatch);
  at::mse_loss(ddp.forward([&] { return model->forward(x); }), y).backward();
  std::vector<at::Tensor> gradients;
  for (const at::Tensor& param : model->parameters()) gradients.push_back(param.grad().clone());
  optimizer.step();
  return gradients;
}

int first_step_worker() {
  const Distributed dist =
      init_distributed(launch_from_environment(process_environment()), Backend::Gloo, std::chrono::seconds(60));
  const DdpOptions options{1024, 256, std::getenv("BUCKET_VIEWS") != nullptr};
  at::manual_seed(11 + dist.rank);
  const Data data{at::rand({(kResumeAt + 1) * kBatch, 8}), at::rand({(kResumeAt + 1) * kBatch, 1})};
  std::vector<at::Tensor> resume_from;
  std::vector<at::Tensor> expected;
  {
    torch::nn::Sequential uninterrupted = test_model(100);
    DistributedModel ddp(uninterrupted.ptr(), dist, options);
    torch::optim::SGD optimizer(uninterrupted->parameters(), torch::optim::SGDOptions(kLr));
    for (int step = 0; step < kResumeAt; ++step) sgd_step(uninterrupted, ddp, optimizer, data, step);
    for (const at::Tensor& param : uninterrupted->parameters()) resume_from.push_back(param.detach().clone());
    expected = sgd_step(uninterrupted, ddp, optimizer, data, kResumeAt);
  }
  torch::nn::Sequential resumed = test_model(200);
  {
    at::NoGradGuard no_grad;
    for (std::size_t i = 0; i < resume_from.size(); ++i) resumed->parameters()[i].copy_(resume_from[i]);
  }
  DistributedModel ddp(resumed.ptr(), dist, options);
  torch::optim::SGD optimizer(resumed->parameters(), torch::optim::SGDOptions(kLr));
  const std::vector<at::Tensor> got = sgd_step(resumed, ddp, optimizer, data, kResumeAt);
  int64_t differing = 0;
  int64_t total = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    differing += got[i].ne(expected[i]).sum().item<int64_t>();
    total += got[i].numel();
  }
  std::cout << "first step's averaged gradients: " << differing << " of " << total << " differ" << std::endl;
  return 0;
}

int mismatch_worker() {
  const Distributed dist =
      init_distributed(launch_from_environment(process_environment()), Backend::Gloo, std::chrono::seconds(60));
  torch::nn::Sequential model = test_model(1, dist.rank == 0 ? 1 : 2);
  try {
    DistributedModel ddp(model.ptr(), dist);
  } catch (const std::exception& e) {
    std::cout << "refused: " << error_message(e) << std::endl;
    return 1;
  }
  return 0;
}

// Single-process SGD on the union of both ranks' batches, from rank 0's initial weights.
torch::nn::Sequential train_on_union(int accumulate) {
  torch::nn::Sequential model = test_model(100);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(kLr).momentum(kMomentum));
  const Data data = test_data(accumulate);
  for (int step = 0; step < kSteps; ++step) {
    optimizer.zero_grad();
    at::mse_loss(model->forward(step_rows(data.inputs, accumulate, step)), step_rows(data.targets, accumulate, step))
        .backward();
    optimizer.step();
  }
  return model;
}

// What rank `rank`'s first backward, left local by no_sync, must produce: its own batch's gradient only.
at::Tensor local_first_gradient(int accumulate, int rank) {
  torch::nn::Sequential model = test_model(100);
  const Data data = test_data(accumulate);
  (at::mse_loss(model->forward(rows(data.inputs, accumulate, 0, 0, rank)), rows(data.targets, accumulate, 0, 0, rank)) /
   accumulate)
      .backward();
  return model->parameters()[0].grad();
}

// Both ranks' output: started with the torchrun variables (Gloo), or under mpirun (the MPI group).
std::string run_train_workers(const std::string& dir, testing::Env env, bool mpi) {
  if (mpi) {
    env["DDP_BACKEND"] = "mpi";
    const testing::Result result = testing::run(testing::mpirun_command(kRanks, {testing::self_path()}), env);
    EXPECT_EQ(result.status, 0) << result.output;
    return result.output;
  }
  std::string output;
  for (const auto& result : testing::run_ranks(kRanks, {testing::self_path()}, dir, env)) {
    EXPECT_EQ(result.status, 0) << result.output;
    output += result.output;
  }
  return output;
}

void expect_ddp_matches_single_process(int accumulate, bool bucket_views, bool mpi = false) {
  const std::string dir = testing::make_temp_dir();
  testing::Env env{{"RUNTIME_TEST_WORKER", "train"}, {"OUT", dir}, {"ACCUMULATE", std::to_string(accumulate)}};
  if (bucket_views) env["BUCKET_VIEWS"] = "1";
  const std::string output = run_train_workers(dir, env, mpi);
  ASSERT_FALSE(::testing::Test::HasFailure()) << output;
  // 1377 floats in 1 KB buckets: several buckets, so that the overlapped path is the one under test.
  const std::size_t at = output.find("buckets=");
  ASSERT_NE(at, std::string::npos) << output;
  EXPECT_GE(std::stoi(output.substr(at + 8)), 3) << output;

  const auto rank0 = testing::load_dict(dir + "/rank0.pt");
  const auto rank1 = testing::load_dict(dir + "/rank1.pt");
  torch::nn::Sequential reference = train_on_union(accumulate);
  for (const auto& item : reference->named_parameters()) {
    const at::Tensor a = rank0.at(item.key()).toTensor();
    const at::Tensor b = rank1.at(item.key()).toTensor();
    EXPECT_TRUE(at::equal(a, b)) << item.key() << " differs between the ranks";
    EXPECT_TRUE(at::allclose(a, item.value(), 1e-5, 1e-6)) << item.key() << " differs from single-process training";
  }
  if (accumulate > 1) {
    const at::Tensor g0 = rank0.at("first_gradient").toTensor();
    const at::Tensor g1 = rank1.at("first_gradient").toTensor();
    EXPECT_FALSE(at::allclose(g0, g1)) << "no_sync gradients were averaged";
    EXPECT_TRUE(at::allclose(g0, local_first_gradient(accumulate, 0), 1e-5, 1e-7));
    EXPECT_TRUE(at::allclose(g1, local_first_gradient(accumulate, 1), 1e-5, 1e-7));
  }
}

TEST(DistributedModel, TwoRanksEndEqualToSingleProcessTrainingOnTheUnionOfTheirData) {
  expect_ddp_matches_single_process(1, false);
  expect_ddp_matches_single_process(1, true);
}

TEST(DistributedModel, NoSyncAccumulatesLocallyAndTheNextSyncAveragesTheSums) {
  expect_ddp_matches_single_process(3, false);
  expect_ddp_matches_single_process(3, true);
}

TEST(DistributedModel, TheMpiGroupEndsEqualToSingleProcessTrainingWithAndWithoutNoSync) {
  if (const std::string why = testing::mpi_missing(); !why.empty()) GTEST_SKIP() << why;
  expect_ddp_matches_single_process(1, true, true);
  expect_ddp_matches_single_process(3, false, true);
}

// A resumed run's process builds its DistributedModel anew, and its first step must average the gradients bit for
// bit as the uninterrupted run's same step does, or the run ends a few ULPs off. With 3 ranks both ways could
// differ: Gloo's ring sums a gradient in an order set by its bucket's layout (which PyTorch's DDP rebuilds after the
// first step), and dividing by 3 is not multiplying by a float's 1/3 (which the Reducer does to a gradient that
// is not yet its bucket's view).
TEST(DistributedModel, AResumedProcessAveragesItsFirstStepBitForBitAsTheUninterruptedRunDoes) {
  for (const bool bucket_views : {true, false}) {
    const std::string dir = testing::make_temp_dir();
    testing::Env env{{"RUNTIME_TEST_WORKER", "first-step"}};
    if (bucket_views) env["BUCKET_VIEWS"] = "1";
    for (const auto& result : testing::run_ranks(kResumeRanks, {testing::self_path()}, dir, env)) {
      EXPECT_EQ(result.status, 0) << result.output;
      EXPECT_TRUE(ddp::testing::contains(result.output, "first step's averaged gradients: 0 of 1377 differ"))
          << (bucket_views ? "gradients as bucket views: " : "gradients copied into buckets: ") << result.output;
    }
  }
}

TEST(DistributedModel, RefusesRanksWhoseParameterShapesDiffer) {
  const std::string dir = testing::make_temp_dir();
  const auto results = testing::run_ranks(kRanks, {testing::self_path()}, dir, {{"RUNTIME_TEST_WORKER", "mismatch"}});
  for (const auto& result : results) EXPECT_EQ(result.status, 1) << result.output;
  // Rank 1 compares its shapes with rank 0's and names the first that differs; rank 0 then loses its peer.
  EXPECT_NE(results[1].output.find("refused: [1]: params[4] in this process with sizes [2, 32] appears not to match"),
            std::string::npos)
      << results[1].output;
}

}  // namespace

namespace testing {

int run_test_worker(const std::string& name) {
  try {
    if (name == "train") return train_worker();
    if (name == "mismatch") return mismatch_worker();
    if (name == "first-step") return first_step_worker();
    if (name.rfind("mpi-", 0) == 0) return mpi_worker(name);
    if (name.rfind("snapshot-", 0) == 0) return snapshot_worker(name);
  } catch (const std::exception& e) {
    std::cerr << "worker " << name << ": " << e.what() << std::endl;
    return 2;
  }
  std::cerr << "unknown worker " << name << std::endl;
  return 2;
}

}  // namespace testing
}  // namespace ddp::runtime
