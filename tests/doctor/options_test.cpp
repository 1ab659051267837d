#include "doctor/run/doctor_options.hpp"

#include <gtest/gtest.h>

#include "core/error.hpp"
#include "test_support.hpp"

namespace ddp::doctor {
namespace {

// The one-line error parse_doctor_options gives for `args`.
std::string error_of(const std::vector<std::string>& args) {
  return ddp::testing::error_of<Error>([&] { parse_doctor_options(args); });
}

TEST(DoctorOptions, BothSpellingsOfValuedOptions) {
  const auto options = parse_doctor_options({"--quick", "--json", "--snapshot-dir", "/fsx/snap", "--interface=eth1",
                                             "--master-port=29501", "--timeout", "2.5", "--workers", "8",
                                             "--snapshot-size=4G", "--min-net-gbps", "25", "--max-clock-ms=5"});
  EXPECT_TRUE(options.quick);
  EXPECT_TRUE(options.json);
  EXPECT_EQ(options.snapshot_dir, "/fsx/snap");
  EXPECT_EQ(options.interface, "eth1");
  EXPECT_EQ(options.master_port, 29501);
  EXPECT_EQ(options.timeout.count(), 2500);
  EXPECT_EQ(options.workers, 8u);
  EXPECT_EQ(options.snapshot_bytes, 4ull << 30);
  EXPECT_EQ(options.thresholds.min_net_gbps, 25);
  EXPECT_EQ(options.thresholds.max_clock_ms, 5);
  EXPECT_EQ(options.thresholds.min_disk_mbps, 200);  // untouched defaults stay
}

TEST(DoctorOptions, BadInputIsOneLineNamingTheValueAndTheFix) {
  EXPECT_EQ(error_of({"--workers", "many"}), "--workers 'many' is not a whole number from 0 to 4096; e.g. --workers 8");
  EXPECT_EQ(error_of({"--frobnicate"}), "unknown option '--frobnicate'; run ddp-doctor --help");
  EXPECT_EQ(error_of({"--snapshot-dir"}), "--snapshot-dir needs a value; run ddp-doctor --help");
  EXPECT_EQ(error_of({"--quick=yes"}), "--quick takes no value; run ddp-doctor --help");
  EXPECT_EQ(error_of({"report"}), "unexpected argument 'report': ddp-doctor takes options only; run ddp-doctor --help");
  EXPECT_EQ(error_of({"--timeout=-1"}), "--timeout '-1' is not a positive number; e.g. --timeout 30");
  EXPECT_EQ(error_of({"--master-port=70000"}),
            "--master-port '70000' is not a whole number from 1 to 65535; e.g. --master-port 29500");
  EXPECT_EQ(error_of({"--snapshot-size=4X"}),
            "--snapshot-size '4X' is not a size; write it in bytes or with K, M, G or T, like 4G");
}

TEST(DoctorOptions, SizesInBytesOrBinaryUnits) {
  EXPECT_EQ(parse_size("1073741824", "s"), 1ull << 30);
  EXPECT_EQ(parse_size("512M", "s"), 512ull << 20);
  EXPECT_EQ(parse_size("1.5GiB", "s"), 3ull << 29);
  EXPECT_EQ(parse_size("2T", "s"), 2ull << 40);
  for (const char* bad : {"", "0", "-1G", "+1G", "1e30", "G", "1 G"}) EXPECT_THROW(parse_size(bad, "s"), Error) << bad;
}

TEST(DoctorOptions, TheTimeBudgetFollowsTimeoutAndQuickAndHelpPrintsIt) {
  const DoctorOptions quick = parse_doctor_options({"--quick", "--timeout", "10"});
  const TimeBudget budget = time_budget(quick);
  EXPECT_EQ(budget.meet, std::chrono::seconds(20));
  EXPECT_EQ(budget.node_speed, std::chrono::seconds(2));
  EXPECT_EQ(budget.node_checks, std::chrono::seconds(3 + 2 + 30 + 10));
  EXPECT_EQ(budget.link_pair, std::chrono::milliseconds(10500));
  EXPECT_EQ(budget.allreduce, std::chrono::seconds(40));
  // meet 20 + node checks 45 + clock 10 + shared dir 13 + links' end 10 + one backend 40 + report 30 = 168 s
  EXPECT_EQ(budget.total(0, 1), std::chrono::seconds(168));
  EXPECT_EQ(budget.total(4, 1), std::chrono::seconds(168 + 42));
  const std::string usage = doctor_usage(quick, 1);
  EXPECT_TRUE(testing::contains(usage, "  --timeout SECONDS ")) << usage;
  EXPECT_TRUE(testing::contains(usage, " longest wait for another rank at any step (default: 30)\n")) << usage;
  EXPECT_TRUE(testing::contains(usage, "time budget: with these options a rank ends within 168 s + 10.5 s per node"))
      << usage;
  // Without --quick: node checks are the 20 s disk write + 10 s node speed + 30 s + --timeout 30 s.
  EXPECT_EQ(time_budget(parse_doctor_options({})).total(2, 2),
            std::chrono::seconds(60 + 90 + 30 + 33 + 66 + 30 + 240 + 90));
}

}  // namespace
}  // namespace ddp::doctor
