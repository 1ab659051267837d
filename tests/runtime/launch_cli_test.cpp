// The command line: what ddp-train reads, and how it refuses bad input.
#include <gtest/gtest.h>

#include "ddp_runtime/cli.hpp"
#include "ddp_runtime/idx.hpp"
#include "env.hpp"
#include "error.hpp"
#include "test_common.hpp"
#include "test_support.hpp"

namespace ddp::runtime {
namespace {

using ddp::testing::error_of;

TEST(Cli, ParsesTheSeedsPositionalsAndOptions) {
  const TrainOptions o = parse_train_args({"--batch-size", "64", "--workload=mlp", "--width", "512", "--keep", "2",
                                           "--snapshot-every-seconds", "30", "--momentum", "0.9", "50", "10"},
                                          env_with({{"DDP_SNAPSHOT_DIR", "/shared/snaps"}}));
  EXPECT_EQ(o.total_epochs, 50);
  EXPECT_EQ(o.save_every, 10);
  EXPECT_EQ(o.batch_size, 64);
  EXPECT_EQ(o.workload, WorkloadKind::Mlp);
  EXPECT_EQ(o.width, 512);
  EXPECT_EQ(o.keep, 2);
  EXPECT_DOUBLE_EQ(o.snapshot_every_seconds, 30);
  EXPECT_DOUBLE_EQ(o.optimizer.momentum, 0.9);
  EXPECT_EQ(o.snapshot_dir, "/shared/snaps");
  EXPECT_EQ(o.output, "finalmodel.pt");
}

TEST(Cli, SnapshotDirOptionOverridesTheEnvironmentAndDefaultsToTheWorkingDirectory) {
  EXPECT_EQ(
      parse_train_args({"--snapshot-dir", "/mine", "5", "1"}, env_with({{"DDP_SNAPSHOT_DIR", "/plugin"}})).snapshot_dir,
      "/mine");
  EXPECT_EQ(parse_train_args({"5", "1"}, env_with({})).snapshot_dir, ".");
}

TEST(Cli, RefusesBadInputNamingTheValueAndTheFix) {
  const auto bad = [](std::vector<std::string> args) {
    return error_of([&] { parse_train_args(args, env_with({})); });
  };
  EXPECT_EQ(bad({"--batch-size", "abc", "5", "1"}),
            "--batch-size 'abc' is not a whole number of at least 1; e.g. --batch-size 32");
  EXPECT_NE(bad({"--workload", "resnet", "5", "1"}).find("use seed, mlp or fashion-mnist"), std::string::npos);
  EXPECT_NE(bad({"--lr", "-1", "5", "1"}).find("--lr '-1'"), std::string::npos);
  EXPECT_NE(bad({"5"}).find("usage: ddp-train"), std::string::npos);
  EXPECT_NE(bad({"--frobnicate", "5", "1"}).find("unknown option '--frobnicate'"), std::string::npos);
  EXPECT_NE(bad({"--workload", "fashion-mnist", "5", "1"}).find("needs --data DIR"), std::string::npos);
  EXPECT_NE(bad({"0", "1"}).find("total_epochs '0'"), std::string::npos);
}

TEST(Idx, ReadsUnsignedByteArraysAndRefusesOthers) {
  const std::string dir = testing::make_temp_dir();
  testing::write_bytes(dir + "/ok", std::string("\0\0\x08\x02\0\0\0\x02\0\0\0\x03"
                                                "abcdef",
                                                18));
  const IdxArray array = read_idx_file(dir + "/ok");
  EXPECT_EQ(array.dims, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(std::string(array.bytes.begin(), array.bytes.end()), "abcdef");
  testing::write_bytes(dir + "/short", std::string("\0\0\x08\x01\0\0\0\x09"
                                                   "abc",
                                                   11));
  EXPECT_NE(error_of([&] { read_idx_file(dir + "/short"); }).find("truncated"), std::string::npos);
  testing::write_bytes(dir + "/gz", "\x1f\x8b\x08\x00");
  EXPECT_NE(error_of([&] { read_idx_file(dir + "/gz"); }).find("gunzip"), std::string::npos);
  EXPECT_NE(error_of([&] { read_idx_file(dir + "/missing"); }).find("cannot open"), std::string::npos);
  // A 16-byte file whose header claims 1.1 GiB was allocated before it was read.
  testing::write_bytes(dir + "/liar", std::string("\0\0\x08\x03\0\0\xea\x60\0\0\0\x1c\0\0\0\x1c", 16));
  EXPECT_EQ(error_of([&] { read_idx_file(dir + "/liar"); }),
            dir + "/liar is truncated: its header promises 47040000 bytes of data, it has 0");
  testing::write_bytes(dir + "/huge", std::string("\0\0\x08\x04\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"
                                                  "\xff\xff\xff\xff",
                                                  20));
  EXPECT_NE(error_of([&] { read_idx_file(dir + "/huge"); }).find("huge is truncated: its header promises 3402823"),
            std::string::npos);
  EXPECT_NE(error_of([&] { read_idx_file("/dev/zero"); }).find("is not a regular file"), std::string::npos);
}

}  // namespace
}  // namespace ddp::runtime
