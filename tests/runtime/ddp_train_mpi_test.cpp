// ddp-train under mpirun: started without MASTER_ADDR, the MPI process group against Gloo, and a job whose rank is
// killed, stopped or fails. Skipped where mpirun is missing.
#include <gtest/gtest.h>

#include <ATen/Functions.h>

#include <signal.h>
#include <sys/types.h>
#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "test_common.hpp"
#include "test_support.hpp"

namespace ddp::runtime {
namespace {

using ddp::testing::contains;

using testing::ddp_train;
using testing::Result;
using testing::train_command;
using testing::with;

// mpirun's messages are wrapped at different columns by OpenMPI 4 and 5.
std::string unwrapped(std::string text) {
  std::replace(text.begin(), text.end(), '\n', ' ');
  return text;
}

TEST(DdpTrain, StartsUnderMpirunWithoutMasterAddr) {
  if (const std::string why = testing::mpi_missing(); !why.empty()) GTEST_SKIP() << why;
  const std::string dir = testing::make_temp_dir();
  const Result result = testing::run(testing::mpirun_command(2, train_command(dir, {"2", "1"})));
  ASSERT_EQ(result.status, 0) << result.output;
  EXPECT_TRUE(contains(result.output, "[CPU0] Epoch 1 | Batchsize: 32 | Steps: 32\n")) << result.output;
  EXPECT_TRUE(contains(result.output, "[CPU1] Epoch 1 | Batchsize: 32 | Steps: 32\n")) << result.output;
  EXPECT_TRUE(contains(result.output, "Final model saved at " + dir + "/final.pt")) << result.output;
}

void expect_close_models(const std::string& a, const std::string& b) {
  const auto first = testing::load_dict(a);
  const auto second = testing::load_dict(b);
  ASSERT_EQ(first.size(), second.size());
  for (const auto& item : first) {
    EXPECT_TRUE(at::allclose(item.value().toTensor(), second.at(item.key()).toTensor(), 1e-5, 1e-7))
        << item.key().toStringRef() << " differs between " << a << " and " << b;
  }
}

// Several small buckets, so that all-reduce overlaps backward as it does in large models.
const std::vector<std::string> kMlpArgs{"--workload",      "mlp", "--width",    "64",  "--samples", "512",
                                        "--batch-size",    "16",  "--momentum", "0.9", "--lr",      "0.01",
                                        "--bucket-cap-mb", "0.01"};

TEST(DdpTrainMpi, EndsWithTheSameModelAsGloo) {
  if (const std::string why = testing::mpi_missing(); !why.empty()) GTEST_SKIP() << why;
  const std::string gloo = testing::make_temp_dir();
  for (const Result& r : testing::run_ranks(2, train_command(gloo, with(kMlpArgs, {"3", "0"})), gloo)) {
    ASSERT_EQ(r.status, 0) << r.output;
  }
  const std::string mpi = testing::make_temp_dir();
  const Result result = testing::run(testing::mpirun_command(2, train_command(mpi, with(kMlpArgs, {"3", "0"}))),
                                     {{"DDP_BACKEND", "mpi"}});
  ASSERT_EQ(result.status, 0) << result.output;
  EXPECT_TRUE(contains(result.output, "[CPU1] Epoch 2 | Batchsize: 16 | Steps: 16\n")) << result.output;
  expect_close_models(gloo + "/final.pt", mpi + "/final.pt");
}

// A long MPI run under mpirun, up to its first epoch line; `dir`/mpirun.log has the job's output.
testing::Process start_long_mpi_run(const std::string& dir, const std::vector<std::string>& args) {
  const auto argv =
      testing::mpirun_command(2, train_command(dir, with(with({"--backend", "mpi"}, args), {"100000", "0"})));
  const testing::Process mpirun = testing::spawn(argv, {}, dir + "/mpirun.log");
  EXPECT_TRUE(testing::wait_for_text(mpirun.output_path, "Epoch 1 | Loss", mpirun))
      << testing::read_text(mpirun.output_path);
  return mpirun;
}

TEST(DdpTrainMpi, AKilledRankEndsTheJobWithAnError) {
  if (const std::string why = testing::mpi_missing(); !why.empty()) GTEST_SKIP() << why;
  const std::string dir = testing::make_temp_dir();
  const testing::Process mpirun = start_long_mpi_run(dir, {});
  const std::vector<pid_t> ranks = testing::children_of(mpirun.pid);
  ASSERT_EQ(ranks.size(), 2u);
  kill(ranks.back(), SIGKILL);
  const int status = testing::wait_at_most(mpirun, std::chrono::seconds(60));
  const std::string output = testing::read_text(mpirun.output_path);
  ASSERT_NE(status, -1) << "the job hung after one rank was killed:\n" << output;
  EXPECT_NE(status, 0) << output;
  EXPECT_TRUE(contains(unwrapped(output), "exited on signal 9 (Killed)")) << output;
}

// A rank that no longer answers leaves the other blocked in a collective: the watchdog aborts the job.
TEST(DdpTrainMpi, AStoppedRankEndsTheJobAfterTheTimeout) {
  if (const std::string why = testing::mpi_missing(); !why.empty()) GTEST_SKIP() << why;
  const std::string dir = testing::make_temp_dir();
  const testing::Process mpirun = start_long_mpi_run(dir, {"--timeout", "2"});
  const std::vector<pid_t> ranks = testing::children_of(mpirun.pid);
  ASSERT_EQ(ranks.size(), 2u);
  kill(ranks.back(), SIGSTOP);
  const int status = testing::wait_at_most(mpirun, std::chrono::seconds(60));
  const std::string output = testing::read_text(mpirun.output_path);
  ASSERT_NE(status, -1) << "the job hung after one rank stopped:\n" << output;
  EXPECT_EQ(status, 1) << output;
  EXPECT_TRUE(contains(output,
                       "has not completed within 2 s (--timeout): another rank has failed, stopped or not "
                       "made the same call; aborting the job"))
      << output;
}

// An error on the ranks after the MPI group exists: MPI_Abort with ddp-train's exit status, not a hang.
TEST(DdpTrainMpi, AFailingRankAbortsTheJobWithItsExitStatus) {
  if (const std::string why = testing::mpi_missing(); !why.empty()) GTEST_SKIP() << why;
  const std::string dir = testing::make_temp_dir();
  testing::write_bytes(dir + "/not-a-dir", "x");
  const auto argv = testing::mpirun_command(2, {ddp_train(), "--backend", "mpi", "--snapshot-dir",
                                                dir + "/not-a-dir/snaps", "--output", dir + "/f.pt", "2", "1"});
  const testing::Process mpirun = testing::spawn(argv, {}, dir + "/mpirun.log");
  const int status = testing::wait_at_most(mpirun, std::chrono::seconds(60));
  const std::string output = testing::read_text(mpirun.output_path);
  ASSERT_NE(status, -1) << "the job hung:\n" << output;
  EXPECT_EQ(status, 2) << output;
  EXPECT_TRUE(contains(output, "ddp-train: ")) << output;
  EXPECT_TRUE(contains(output, dir + "/not-a-dir")) << output;
  EXPECT_FALSE(contains(output, "Epoch")) << output;
}

}  // namespace
}  // namespace ddp::runtime
