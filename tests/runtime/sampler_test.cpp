// DistributedSampler against PyTorch's own, run by Debian's python3-torch: the same indices, in the same
// order, for the same dataset size, world size, rank, seed and epoch.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>
#include <sstream>

#include "ddp_runtime/data/sampler.hpp"
#include "test_support.hpp"

namespace ddp::runtime {
namespace {

struct Case {
  int64_t size;
  int replicas;
  int rank;
  uint64_t seed;
  int64_t epoch;
  bool shuffle;
  bool drop_last;

  std::string spec() const {
    std::ostringstream text;
    text << size << ',' << replicas << ',' << rank << ',' << seed << ',' << epoch << ',' << shuffle << ',' << drop_last;
    return text.str();
  }
  std::string indices() const {
    DistributedSampler sampler(size, replicas, rank, shuffle, seed, drop_last);
    sampler.set_epoch(epoch);
    std::string text;
    for (const int64_t index : sampler.indices()) text += (text.empty() ? "" : " ") + std::to_string(index);
    return text;
  }
};

const std::vector<Case> kCases = {
    {2048, 2, 0, 0, 0, true, false},  {2048, 2, 1, 0, 0, true, false},    {2048, 2, 1, 0, 7, true, false},
    {2048, 4, 3, 42, 3, true, false}, {1000, 3, 2, 5, 1, true, false},    {1000, 3, 2, 5, 1, true, true},
    {10, 4, 3, 0, 2, true, false},    {3, 8, 7, 1, 0, true, false},       {1001, 7, 4, 9, 11, false, false},
    {1001, 7, 6, 9, 11, false, true}, {60000, 8, 5, 123, 4, true, false},
};

TEST(Sampler, GivesPyTorchsIndicesForTheSameSeedEpochRankAndWorldSize) {
  const std::string python = testing::torch_python();
  if (python.empty()) GTEST_SKIP() << "Debian's python3-torch is not installed";
  std::vector<std::string> argv{python, testing::python_script("sampler_indices.py")};
  for (const Case& c : kCases) argv.push_back(c.spec());
  const testing::Result result = testing::run(argv);
  ASSERT_EQ(result.status, 0) << result.output;
  std::istringstream lines(result.output);
  for (const Case& c : kCases) {
    std::string expected;
    std::getline(lines, expected);
    EXPECT_EQ(c.indices(), expected) << "case " << c.spec();
  }
}

TEST(Sampler, RanksTogetherCoverTheDatasetWithEqualShares) {
  const int replicas = 3;
  std::multiset<int64_t> seen;
  for (int rank = 0; rank < replicas; ++rank) {
    DistributedSampler sampler(1000, replicas, rank, true, 0);
    sampler.set_epoch(1);
    const std::vector<int64_t> indices = sampler.indices();
    EXPECT_EQ(static_cast<int64_t>(indices.size()), sampler.num_samples());
    EXPECT_EQ(indices.size(), 334u);
    seen.insert(indices.begin(), indices.end());
  }
  for (int64_t i = 0; i < 1000; ++i) EXPECT_GE(seen.count(i), 1u);
  EXPECT_EQ(seen.size(), 1002u);  // padded by two repeated indices
}

TEST(Sampler, ShufflesDifferentlyEachEpoch) {
  DistributedSampler sampler(512, 2, 0, true, 0);
  sampler.set_epoch(0);
  const std::vector<int64_t> first = sampler.indices();
  sampler.set_epoch(1);
  EXPECT_NE(sampler.indices(), first);
  sampler.set_epoch(0);
  EXPECT_EQ(sampler.indices(), first);
}

TEST(EpochPlan, StepsAreTheDataLoadersBatchesTakenAccumulateAtATime) {
  std::vector<int64_t> indices(70);
  std::iota(indices.begin(), indices.end(), 100);
  const EpochPlan plan = plan_epoch(indices, 16, 2);
  EXPECT_EQ(plan.samples, indices);
  ASSERT_EQ(plan.steps.size(), 3u);  // batches of 16, 16 | 16, 16 | 6
  EXPECT_EQ(plan.steps[1].size(), 2u);
  EXPECT_EQ(plan.steps[1][1].start, 48);
  EXPECT_EQ(plan.steps[1][1].size, 16);
  ASSERT_EQ(plan.steps[2].size(), 1u);
  EXPECT_EQ(plan.steps[2][0].size, 6);
}

// After a rank is lost mid-epoch (or one joins), the rest of the epoch goes to the new world: every sample not yet
// trained exactly once, every rank the same number of steps and of batches in each step (they run the same
// collectives), no batch empty, none more than one sample over the batch size.
TEST(EpochPlan, TheRestOfAnEpochIsTrainedOnceOverAnyWorld) {
  struct Case {
    int64_t size, consumed;
    int world;
    int64_t batch, accumulate;
  };
  for (const Case c : {Case{2048, 768, 3, 32, 1}, Case{2048, 0, 5, 32, 1}, Case{1000, 990, 3, 4, 1},
                       Case{1000, 998, 3, 4, 2}, Case{1001, 1000, 4, 8, 1}, Case{100, 7, 4, 5, 3},
                       Case{65, 0, 2, 32, 1}, Case{2048, 2048, 3, 32, 1}, Case{97, 3, 7, 1, 4}}) {
    SCOPED_TRACE(std::to_string(c.size) + " samples, " + std::to_string(c.consumed) + " consumed, world " +
                 std::to_string(c.world) + ", batch " + std::to_string(c.batch) + " x " + std::to_string(c.accumulate));
    std::vector<int64_t> order(static_cast<std::size_t>(c.size));
    std::iota(order.begin(), order.end(), 0);
    std::reverse(order.begin(), order.end());
    std::multiset<int64_t> seen;
    std::vector<std::size_t> batches_per_step;
    for (int rank = 0; rank < c.world; ++rank) {
      const EpochPlan plan = plan_rest_of_epoch(order, c.consumed, c.world, rank, c.batch, c.accumulate);
      std::vector<std::size_t> mine;
      int64_t covered = 0;
      for (const auto& step : plan.steps) {
        mine.push_back(step.size());
        for (const BatchSpan& batch : step) {
          EXPECT_GE(batch.size, 1);
          EXPECT_LE(batch.size, c.batch + 1);
          EXPECT_EQ(batch.start, covered) << "batches follow one another";
          covered += batch.size;
        }
      }
      EXPECT_EQ(covered, static_cast<int64_t>(plan.samples.size()));
      if (rank == 0) batches_per_step = mine;
      EXPECT_EQ(mine, batches_per_step) << "rank " << rank << " runs other collectives than rank 0";
      seen.insert(plan.samples.begin(), plan.samples.end());
    }
    const int64_t rest = std::max<int64_t>(c.size - c.consumed, 0);
    const int64_t repeats = rest > 0 && rest < c.world ? c.world - rest : 0;
    EXPECT_EQ(static_cast<int64_t>(seen.size()), rest + repeats);
    for (int64_t i = c.consumed; i < c.size; ++i) EXPECT_GE(seen.count(order[i]), 1u) << "left out: " << order[i];
    if (repeats == 0) {
      for (int64_t i = c.consumed; i < c.size; ++i) EXPECT_EQ(seen.count(order[i]), 1u) << "twice: " << order[i];
    }
  }
}

// Every full step of the rest takes samples in the order's global sequence, so that the samples trained after k
// steps are a prefix of the rest: the position to continue from after another change of world.
TEST(EpochPlan, FullStepsOfTheRestConsumeAPrefixOfTheOrder) {
  std::vector<int64_t> order(500);
  std::iota(order.begin(), order.end(), 0);
  const int world = 3;
  std::set<int64_t> first_two_steps;
  for (int rank = 0; rank < world; ++rank) {
    const EpochPlan plan = plan_rest_of_epoch(order, 40, world, rank, 8, 1);
    ASSERT_GE(plan.steps.size(), 2u);
    for (int64_t i = 0; i < 16; ++i) first_two_steps.insert(plan.samples[i]);
  }
  std::set<int64_t> prefix;
  for (int64_t i = 40; i < 40 + 2 * world * 8; ++i) prefix.insert(order[i]);
  EXPECT_EQ(first_two_steps, prefix);
}

}  // namespace
}  // namespace ddp::runtime
