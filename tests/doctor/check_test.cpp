#include "doctor/checks/check.hpp"

#include <gtest/gtest.h>

#include "doctor/run/allreduce.hpp"
#include "doctor/run/clock.hpp"
#include "test_support.hpp"

namespace ddp::doctor {
namespace {

using testing::contains;

TEST(Grades, AtLeastAndAtMostAtTheirBoundaries) {
  EXPECT_EQ(grade_at_least(10, 10, 1), Status::Ok);  // exactly the threshold passes
  EXPECT_EQ(grade_at_least(9.99, 10, 1), Status::Warn);
  EXPECT_EQ(grade_at_least(0.5, 10, 1), Status::Fail);
  EXPECT_EQ(grade_at_most(100, 100, 300), Status::Ok);
  EXPECT_EQ(grade_at_most(100.1, 100, 300), Status::Warn);
  EXPECT_EQ(grade_at_most(301, 100, 300), Status::Fail);
}

TEST(Grades, WorstIgnoresSkips) {
  EXPECT_EQ(worst({skipped(checks::kCpuCores, "why"), make_result(checks::kOmpThreads, Status::Ok, "")}), Status::Ok);
  EXPECT_EQ(worst({make_result(checks::kCpuCores, Status::Warn, ""), make_result(checks::kOmpThreads, Status::Ok, "")}),
            Status::Warn);
  EXPECT_EQ(
      worst({make_result(checks::kCpuCores, Status::Fail, ""), make_result(checks::kOmpThreads, Status::Warn, "")}),
      Status::Fail);
}

TEST(Units, BytesRatesAndDurations) {
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(1536), "1.5 KiB");
  EXPECT_EQ(format_bytes(64u << 10), "64 KiB");
  EXPECT_EQ(format_bytes(4ull << 30), "4 GiB");
  EXPECT_EQ(format_gbits(1.25e9), "10.00 Gbit/s");
  EXPECT_EQ(format_mbytes(354.2e6), "354.2 MB/s");
  EXPECT_EQ(format_gbytes(1.234e9), "1.23 GB/s");
  EXPECT_EQ(format_seconds(12e-6), "12 us");
  EXPECT_EQ(format_seconds(3.4e-3), "3.40 ms");
  EXPECT_EQ(format_seconds(1.25), "1.25 s");
  EXPECT_EQ(format_seconds(-2e-3), "-2.00 ms");
}

TEST(BusBandwidth, FollowsNcclTests) {
  // busbw = algbw * 2(n-1)/n: equal to algbw for 2 ranks, approaching 2x for many.
  EXPECT_DOUBLE_EQ(bus_bandwidth(1e9, 2), 1e9);
  EXPECT_DOUBLE_EQ(bus_bandwidth(1e9, 4), 1.5e9);
  EXPECT_DOUBLE_EQ(bus_bandwidth(1e9, 8), 1.75e9);
  EXPECT_DOUBLE_EQ(bus_bandwidth(1e9, 1), 0);
  EXPECT_DOUBLE_EQ(algorithm_bandwidth(4u << 20, 0.004), (4u << 20) / 0.004);
  EXPECT_DOUBLE_EQ(algorithm_bandwidth(1, 0), 0);
}

TEST(BusBandwidth, ExpectedSumMatchesTheFillValues) {
  for (int ranks : {1, 2, 3, 64, 1024}) {
    float sum = 0;
    for (int i = 0; i < ranks; ++i) sum += fill_value(i);
    EXPECT_EQ(sum, expected_sum(ranks)) << ranks;
  }
}

TEST(BusBandwidth, GradedRowsShowFiguresAndFailOnWrongSums) {
  const std::vector<AllreduceTiming> timings{{1u << 20, 0.001, true}, {4u << 20, 0.002, false}};
  const auto rows = grade_allreduce(checks::kAllreduceGloo, timings, 4, {{}, {"rank 3"}});
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].check, "allreduce.gloo");
  EXPECT_EQ(rows[0].status, Status::Ok);
  EXPECT_EQ(rows[0].value, "busbw 1.57 GB/s @ 1 MiB");  // 1048576 B / 1 ms * 1.5
  EXPECT_TRUE(contains(rows[0].detail, "algbw 1.05 GB/s, 1.00 ms per all-reduce, 4 ranks"));
  EXPECT_EQ(rows[1].status, Status::Fail);
  EXPECT_TRUE(contains(rows[1].detail, "wrong sums on rank 3"));
  EXPECT_TRUE(contains(rows[1].detail, "expected every element to be 10"));
}

TEST(ClockOffset, RecoversAKnownOffsetFromASymmetricExchange) {
  // The peer's clock is 5 ms ahead; 200 us each way, 30 us inside the peer.
  const int64_t ahead = 5'000'000;
  const ClockSample sample{1'000'000'000, 1'000'200'000 + ahead, 1'000'230'000 + ahead, 1'000'430'000};
  const ClockOffset offset = offset_of(sample);
  EXPECT_EQ(offset.offset_ns, ahead);
  EXPECT_EQ(offset.error_ns, 200'000);  // half the 400 us spent on the wire
}

TEST(ClockOffset, BestSampleIsTheOneWithTheLeastDelay) {
  const int64_t behind = -2'000'000;
  // A queued sample (900 us out, 100 us back) skews the estimate; the quick one does not.
  const std::vector<ClockSample> samples{
      {0, 900'000 + behind, 900'000 + behind, 1'000'000},
      {2'000'000, 2'050'000 + behind, 2'050'000 + behind, 2'100'000},
  };
  EXPECT_EQ(offset_of(samples[0]).offset_ns, behind + 400'000);
  const ClockOffset best = best_offset(samples);
  EXPECT_EQ(best.offset_ns, behind);
  EXPECT_EQ(best.error_ns, 50'000);
}

// The peer's two times arrive from the wire; extreme values overflowed int64 (undefined behaviour).
TEST(ClockOffset, ExtremeTimesFromAPeerNeitherOverflowNorPass) {
  const ClockOffset far = offset_of({0, INT64_MAX, INT64_MAX, 1000});
  EXPECT_GT(far.offset_ns, int64_t{4'000'000'000'000'000'000});
  EXPECT_EQ(offset_of({INT64_MAX, INT64_MIN, INT64_MIN, INT64_MAX}).offset_ns, INT64_MIN);
  EXPECT_EQ(grade_clock_offset(far, 100, 300).status, Status::Fail);
}

TEST(ClockOffset, GradedAgainstLogAndMungeLimits) {
  const auto ok = grade_clock_offset({2'000'000, 10'000}, 100, 300);
  EXPECT_EQ(ok.status, Status::Ok);
  EXPECT_EQ(ok.value, "+2.00 ms +- 10 us");
  const auto warn = grade_clock_offset({-250'000'000, 10'000}, 100, 300);
  EXPECT_EQ(warn.status, Status::Warn);
  EXPECT_EQ(warn.value, "-250.00 ms +- 10 us");
  EXPECT_TRUE(contains(warn.detail, "chrony"));
  const auto fail = grade_clock_offset({400'000'000'000, 10'000}, 100, 300);
  EXPECT_EQ(fail.status, Status::Fail);
  EXPECT_TRUE(contains(fail.detail, "munge"));
}

}  // namespace
}  // namespace ddp::doctor
