// When a run goes wrong (issue 15): a stopped rank is named at the timeout, a slow rank is named once per epoch
// and a rank that keeps pace is not, and a failure leaves torchrun's error file, read back by torchrun's own code.
// Real ddp-train processes on 127.0.0.1; slowness and hangs are SIGSTOP, whatever the machine's load.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <regex>
#include <thread>

#include "ddp_runtime/straggler.hpp"
#include "netif.hpp"
#include "test_common.hpp"
#include "test_support.hpp"

namespace ddp::runtime {
namespace {

using ddp::testing::contains;

using testing::ddp_train;

std::vector<std::string> mlp_run(const std::string& dir, const std::vector<std::string>& more) {
  std::vector<std::string> argv{
      ddp_train(), "--snapshot-dir", dir,   "--output", dir + "/final.pt", "--workload", "mlp", "--width",
      "512",       "--samples",      "4096"};
  argv.insert(argv.end(), more.begin(), more.end());
  return argv;
}

// The "stragglers" lists of the JSON lines rank 0 printed, one per epoch.
std::vector<std::string> named_per_epoch(const std::string& output) {
  static const std::regex named("\"stragglers\": \\[([0-9, ]*)\\]");
  std::vector<std::string> lists;
  for (auto it = std::sregex_iterator(output.begin(), output.end(), named); it != std::sregex_iterator(); ++it) {
    lists.push_back((*it)[1].str());
  }
  return lists;
}

// Stops `pid` for `stopped` out of every `stopped + running`, until `done`: a rank that computes several times slower
// than the others, however busy the machine is.
std::thread duty_cycle(pid_t pid, std::chrono::milliseconds stopped, std::chrono::milliseconds running,
                       std::atomic<bool>& done) {
  return std::thread([=, &done] {
    while (!done && kill(pid, SIGSTOP) == 0) {
      std::this_thread::sleep_for(stopped);
      kill(pid, SIGCONT);
      std::this_thread::sleep_for(running);
    }
    kill(pid, SIGCONT);
  });
}

TEST(Stragglers, SlowerThanTheMedianByMoreThanTheThreshold) {
  double median = 0;
  EXPECT_EQ(slower_than_median({10, 11, 9, 30}, 20, &median), std::vector<int>{3});
  EXPECT_DOUBLE_EQ(median, 10.5);
  EXPECT_TRUE(slower_than_median({10, 11, 9, 12.5}, 20, &median).empty()) << "12.5 is within 20% of 10.5";
  EXPECT_EQ(slower_than_median({10, 12.7, 9}, 20, &median), std::vector<int>{1});
  EXPECT_DOUBLE_EQ(median, 10);
  EXPECT_TRUE(slower_than_median({0, 0}, 20, &median).empty()) << "nothing measured, nobody named";
  EXPECT_EQ(slower_than_median({0, 5, 5, 50}, 20, &median), std::vector<int>{3}) << "an unmeasured rank is no median";
}

// One rank stopped 60 ms of every 65 computes about 5x slower than the median (measured here: 4.3x to 6x), and
// ranks that keep pace stayed within 1.5x of it even with 4 ranks on 2 cores of a loaded machine (load average 8,
// see runtime/README.md): with the threshold at 100% (2x), both margins are wide.
// Every epoch must name the slow rank and only it; the run without slowdown names nobody.
TEST(Stragglers, TheSlowRankIsNamedEveryEpochAndTheOthersNever) {
  const std::string dir = testing::make_temp_dir();
  testing::run({"mkdir", dir + "/slow", dir + "/clean"});
  const std::vector<std::string> args{"--json", "--straggler-threshold", "100", "2", "0"};
  auto ranks = testing::spawn_ranks(4, mlp_run(dir + "/slow", args), dir);
  std::atomic<bool> done{false};
  std::thread slowdown = duty_cycle(ranks[2].pid, std::chrono::milliseconds(60), std::chrono::milliseconds(5), done);
  std::vector<int> status;
  for (const auto& rank : ranks) status.push_back(testing::wait_at_most(rank, std::chrono::seconds(100)));
  done = true;
  slowdown.join();
  const std::string output = testing::read_text(ranks[0].output_path);
  for (const int s : status) ASSERT_EQ(s, 0) << output;
  EXPECT_EQ(named_per_epoch(output), (std::vector<std::string>{"2", "2"})) << output;
  EXPECT_TRUE(contains(output, "Epoch 0 | Straggler: rank 2 on " + host_name() + " (cpu) computes ")) << output;
  EXPECT_TRUE(contains(output, "x the median (")) << output;

  const auto clean = testing::run_ranks(4, mlp_run(dir + "/clean", args), dir);
  for (const auto& rank : clean) ASSERT_EQ(rank.status, 0) << rank.output;
  EXPECT_EQ(named_per_epoch(clean[0].output), (std::vector<std::string>{"", ""})) << clean[0].output;
  EXPECT_FALSE(contains(clean[0].output, "Straggler:")) << clean[0].output;
  EXPECT_TRUE(contains(clean[0].output, "{\"rank\": 3, \"host\": \"" + host_name() + "\", \"device\": \"cpu\", "))
      << clean[0].output;
}

// A stopped rank fails the others' next collective at --timeout; rank 0 names it and every other rank ends with
// rank 0's verdict. (The run is bounded here only to catch a hang; the time it takes is measured in bench/.)
TEST(PeerCheck, AStoppedRankIsNamedByRankZeroAfterTheTimeout) {
  const std::string dir = testing::make_temp_dir();
  auto ranks = testing::spawn_ranks(3, mlp_run(dir, {"--timeout", "3", "--width", "64", "10000", "0"}), dir);
  ASSERT_TRUE(testing::wait_for_text(ranks[0].output_path, "Epoch 1 | Loss", ranks[0]));
  kill(ranks[1].pid, SIGSTOP);
  const int rank0 = testing::wait_at_most(ranks[0], std::chrono::seconds(60));
  const int rank2 = testing::wait_at_most(ranks[2], std::chrono::seconds(60));
  kill(ranks[1].pid, SIGKILL);
  kill(ranks[1].pid, SIGCONT);
  testing::wait_for(ranks[1]);
  const std::string output0 = testing::read_text(ranks[0].output_path);
  const std::string output2 = testing::read_text(ranks[2].output_path);
  EXPECT_EQ(rank0, 1) << output0;
  EXPECT_EQ(rank2, 1) << output2;
  const std::string verdict =
      "rank 1 on " + host_name() + " (cpu) did not answer within 3 s after a collective failed (";
  EXPECT_TRUE(contains(output0, "ddp-train: " + verdict)) << output0;
  EXPECT_TRUE(contains(output0, "): stopped, hung or gone\n")) << output0;
  EXPECT_TRUE(contains(output2, "ddp-train: rank 2: rank 0 found that " + verdict)) << output2;
}

// What ddp-train writes on failure is what torchrun's own reader (ProcessFailure, Debian's python3-torch) reads.
TEST(FailureReport, TorchrunReadsDdpTrainsErrorFile) {
  const std::string python = testing::torch_python();
  if (python.empty()) GTEST_SKIP() << "Debian's python3-torch is not installed";
  const std::string dir = testing::make_temp_dir();
  const std::string file = dir + "/error.json";
  const auto failed = testing::run({ddp_train(), "--batch-size", "0", "1", "0"},
                                   {{"TORCHELASTIC_ERROR_FILE", file}, {"TORCHELASTIC_RUN_ID", "12.3"}, {"RANK", "0"}});
  ASSERT_EQ(failed.status, 2) << failed.output;
  const auto read =
      testing::run({python, "-c",
                    "import sys\n"
                    "from torch.distributed.elastic.multiprocessing.errors import ProcessFailure\n"
                    "f = ProcessFailure(local_rank=0, pid=1, exitcode=2, error_file=sys.argv[1])\n"
                    "print('message:', f.message['message'])\n"
                    "print('errorCode:', f.message['errorCode'], 'run_id:', f.message['extraInfo']['run_id'])\n"
                    "print('timestamp ok:', f.timestamp > 1600000000)\n",
                    file});
  ASSERT_EQ(read.status, 0) << read.output;
  EXPECT_TRUE(contains(read.output, "message: --batch-size '0' is not a whole number of at least 1")) << read.output;
  EXPECT_TRUE(contains(read.output, "errorCode: 2 run_id: 12.3\n")) << read.output;
  EXPECT_TRUE(contains(read.output, "timestamp ok: True\n")) << read.output;
}

}  // namespace
}  // namespace ddp::runtime
