// DistributedSampler against PyTorch's own, run by Debian's python3-torch: the same indices, in the same
// order, for the same dataset size, world size, rank, seed and epoch.
#include <gtest/gtest.h>

#include <set>
#include <sstream>

#include "ddp_runtime/sampler.hpp"
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

}  // namespace
}  // namespace ddp::runtime
