#include "doctor/checks/node_speed.hpp"

#include <gtest/gtest.h>

#include <cstdlib>

namespace ddp::doctor {
namespace {

CheckResult row(const CheckInfo& check, const std::string& value, int rank) {
  CheckResult result = make_result(check, Status::Ok, value, "", "measured");
  result.rank = rank;
  result.host = "node" + std::to_string(rank + 1);
  return result;
}

TEST(NodeSpeed, MeasuresThisNodesGemmAndMemoryBandwidth) {
  const std::vector<CheckResult> results = measure_node_speed(true, std::chrono::seconds(60));
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].check, "node.compute");
  EXPECT_GT(std::strtod(results[0].value.c_str(), nullptr), 0.0) << results[0].value;
  EXPECT_NE(results[0].value.find(" GFLOP/s"), std::string::npos) << results[0].value;
  EXPECT_NE(results[0].detail.find("single-precision GEMM 384x384 through "), std::string::npos) << results[0].detail;
  EXPECT_EQ(results[1].check, "node.memory_bw");
  EXPECT_GT(std::strtod(results[1].value.c_str(), nullptr), 0.0) << results[1].value;
  EXPECT_NE(results[1].value.find(" GB/s"), std::string::npos) << results[1].value;
}

// The budget bounds the repeats, so that the doctor's time budget holds: with none left, each runs once. A run
// lasts at least 0.2 s with --quick, however fast its kernel, so that a share of the cores shows in it.
TEST(NodeSpeed, RepeatsStopAtTheBudgetAfterTheFirstRun) {
  const auto start = std::chrono::steady_clock::now();
  const std::vector<CheckResult> spent = measure_node_speed(true, std::chrono::milliseconds(0));
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(400));
  ASSERT_EQ(spent.size(), 2u);
  for (const CheckResult& result : spent) {
    EXPECT_GT(std::strtod(result.value.c_str(), nullptr), 0.0) << result.value;
    EXPECT_NE(result.detail.find(", best of 1 runs of 0.2 s"), std::string::npos) << result.detail;
  }
  const std::vector<CheckResult> ample = measure_node_speed(true, std::chrono::seconds(60));
  for (const CheckResult& result : ample) EXPECT_NE(result.detail.find(", best of 3"), std::string::npos);
}

TEST(NodeSpeed, NodesBelowTheMedianByMoreThanTheThresholdWarn) {
  std::vector<CheckResult> all{row(checks::kNodeCompute, "100.0 GFLOP/s", 0),
                               row(checks::kNodeCompute, "98.0 GFLOP/s", 1),
                               row(checks::kNodeCompute, "70.0 GFLOP/s", 2),
                               row(checks::kNodeCompute, "81.0 GFLOP/s", 3),
                               row(checks::kNodeMemoryBw, "10.00 GB/s", 0),
                               row(checks::kNodeMemoryBw, "9.50 GB/s", 1),
                               row(checks::kInterface, "eth0", 0)};
  grade_node_speeds(all, 20);
  // Median of 70, 81, 98, 100 is 89.5: 70 is 22% below it, 81 is 9.5% below.
  EXPECT_EQ(all[0].status, Status::Ok);
  EXPECT_EQ(all[1].status, Status::Ok);
  EXPECT_EQ(all[2].status, Status::Warn);
  EXPECT_EQ(all[2].detail.substr(0, 51), "22% below the median of 4 nodes (89.50 GFLOP/s): a ");
  EXPECT_EQ(all[3].status, Status::Ok);
  EXPECT_NE(all[3].detail.find("the median of 4 nodes is 89.50 GFLOP/s"), std::string::npos) << all[3].detail;
  EXPECT_EQ(all[0].threshold, "within 20% of the nodes' median");
  EXPECT_EQ(all[4].status, Status::Ok);
  EXPECT_EQ(all[5].status, Status::Ok);
  EXPECT_EQ(all[6].detail, "measured") << "other checks are left alone";
}

TEST(NodeSpeed, OneNodeHasNothingToCompareWith) {
  std::vector<CheckResult> all{row(checks::kNodeCompute, "5.0 GFLOP/s", 0)};
  grade_node_speeds(all, 20);
  EXPECT_EQ(all[0].status, Status::Ok);
  EXPECT_EQ(all[0].detail, "measured");
}

}  // namespace
}  // namespace ddp::doctor
