#include "doctor/doctor_options.hpp"

#include <gtest/gtest.h>

#include "doctor/launch.hpp"
#include "error.hpp"
#include "test_support.hpp"

namespace ddp::doctor {
namespace {

using testing::fake_env;

std::string error_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
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
  EXPECT_EQ(error_of([] { parse_doctor_options({"--workers", "many"}); }),
            "--workers 'many' is not a whole number from 0 to 4096");
  EXPECT_EQ(error_of([] { parse_doctor_options({"--frobnicate"}); }),
            "unknown option '--frobnicate'; ddp-doctor --help lists the options");
  EXPECT_EQ(error_of([] { parse_doctor_options({"--snapshot-dir"}); }),
            "option --snapshot-dir needs a value, like --snapshot-dir=VALUE");
  EXPECT_EQ(error_of([] { parse_doctor_options({"--timeout=-1"}); }),
            "--timeout '-1' is not a positive number; write it like 10 or 2.5");
  EXPECT_EQ(error_of([] { parse_doctor_options({"--master-port=70000"}); }),
            "--master-port '70000' is not a whole number from 1 to 65535");
  EXPECT_EQ(error_of([] { parse_doctor_options({"--snapshot-size=4X"}); }),
            "--snapshot-size '4X' is not a size; write it in bytes or with K, M, G or T, like 4G");
}

TEST(DoctorOptions, SizesInBytesOrBinaryUnits) {
  EXPECT_EQ(parse_size("1073741824", "s"), 1ull << 30);
  EXPECT_EQ(parse_size("512M", "s"), 512ull << 20);
  EXPECT_EQ(parse_size("1.5GiB", "s"), 3ull << 29);
  EXPECT_EQ(parse_size("2T", "s"), 2ull << 40);
  for (const char* bad : {"", "0", "-1G", "+1G", "1e30", "G", "1 G"}) EXPECT_THROW(parse_size(bad, "s"), Error) << bad;
}

TEST(Launch, NoLauncherMeansThisProcessAlone) {
  const Launch launch = detect_launch(fake_env({}), {});
  EXPECT_EQ(launch.kind, LaunchKind::Single);
  EXPECT_EQ(launch.world_size, 1);
  EXPECT_EQ(launch.master_addr, "");
}

TEST(Launch, TorchrunVariablesWithOptionsOverriding) {
  DoctorOptions options;
  options.master_port = 30000;
  const Launch launch = detect_launch(
      fake_env({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}, {"MASTER_ADDR", "node1"},
                {"MASTER_PORT", "29500"}, {"TORCHELASTIC_RUN_ID", "42.0"}, {"DDP_BACKEND", "nccl"}}),
      options);
  EXPECT_EQ(launch.kind, LaunchKind::Env);
  EXPECT_EQ(launch.rank, 3);
  EXPECT_EQ(launch.world_size, 4);
  EXPECT_EQ(launch.local_rank, 1);
  EXPECT_EQ(launch.master_addr, "node1");
  EXPECT_EQ(launch.master_port, 30000);
  EXPECT_EQ(launch.session, "42.0");
  EXPECT_TRUE(launch.nccl_backend);
}

TEST(Launch, OpenMpiVariablesWinOverTorchruns) {
  const Launch launch = detect_launch(fake_env({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"},
                                                {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"RANK", "7"}}),
                                      {});
  EXPECT_EQ(launch.kind, LaunchKind::Mpi);
  EXPECT_EQ(launch.rank, 1);
  EXPECT_EQ(launch.local_rank, 1);
  EXPECT_FALSE(launch.master_port);
}

TEST(Launch, InconsistentVariablesAreUsageErrors) {
  EXPECT_EQ(error_of([] { detect_launch(fake_env({{"RANK", "2"}, {"WORLD_SIZE", "2"}}), {}); }),
            "RANK '2' is not below WORLD_SIZE 2; every rank must be one of 0..WORLD_SIZE-1");
  EXPECT_EQ(error_of([] { detect_launch(fake_env({{"RANK", "x"}, {"WORLD_SIZE", "2"}}), {}); }),
            "RANK 'x' is not a whole number from 0 to 1048576");
  EXPECT_EQ(error_of([] { detect_launch(fake_env({{"RANK", "0"}}), {}); }),
            "WORLD_SIZE is not set; start ddp-doctor with srun --ddp, torchrun or mpirun");
  EXPECT_EQ(error_of([] { detect_launch(fake_env({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "1"}}), {}); }),
            "RANK and WORLD_SIZE are set but MASTER_ADDR is not; export it (srun --ddp does) or pass --master-addr");
  EXPECT_EQ(error_of([] {
              detect_launch(fake_env({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "0"}}),
                            {});
            }),
            "MASTER_PORT '0' is not a whole number from 1 to 65535");
}

}  // namespace
}  // namespace ddp::doctor
