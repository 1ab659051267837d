// The environment contract and the command line: what ddp-train reads, and how it refuses bad input.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <map>

#include "ddp_runtime/cli.hpp"
#include "ddp_runtime/idx.hpp"
#include "ddp_runtime/launch.hpp"
#include "ddp_runtime/snapshot_files.hpp"
#include "error.hpp"
#include "test_support.hpp"

namespace ddp::runtime {
namespace {

EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    const auto found = vars.find(name);
    if (found == vars.end()) return std::nullopt;
    return found->second;
  };
}

std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(Launch, ReadsTheTorchrunVariablesThatSrunDdpExports) {
  const Launch launch = launch_from_environment(env_of({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"},
                                                       {"LOCAL_WORLD_SIZE", "2"}, {"MASTER_ADDR", "node1"},
                                                       {"MASTER_PORT", "29500"}, {"GLOO_SOCKET_IFNAME", "eth0,ib0"},
                                                       {"DDP_BACKEND", "gloo"}, {"TORCHELASTIC_RESTART_COUNT", "2"},
                                                       {"OMP_NUM_THREADS", "4"}}));
  EXPECT_EQ(launch.source, LaunchSource::Torchrun);
  EXPECT_EQ(launch.rank, 3);
  EXPECT_EQ(launch.world_size, 4);
  EXPECT_EQ(launch.local_rank, 1);
  EXPECT_EQ(launch.local_world_size, 2);
  EXPECT_EQ(launch.master_addr, "node1");
  EXPECT_EQ(launch.master_port, 29500);
  EXPECT_EQ(launch.socket_ifnames, (std::vector<std::string>{"eth0", "ib0"}));
  EXPECT_EQ(launch.backend, BackendHint::Gloo);
  EXPECT_EQ(launch.restart_count, 2);
  EXPECT_EQ(launch.omp_num_threads, 4);
}

TEST(Launch, ReadsOpenMpiVariablesUnderMpirun) {
  const Launch launch = launch_from_environment(env_of({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"},
                                                       {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                                       {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}}));
  EXPECT_EQ(launch.source, LaunchSource::OpenMpi);
  EXPECT_EQ(launch.rank, 1);
  EXPECT_EQ(launch.world_size, 2);
  EXPECT_EQ(launch.local_world_size, 2);
  EXPECT_TRUE(launch.master_addr.empty());  // shared over MPI by rank 0
}

TEST(Launch, IsOneProcessWhenNothingIsSet) {
  const Launch launch = launch_from_environment(env_of({}));
  EXPECT_EQ(launch.source, LaunchSource::SingleProcess);
  EXPECT_EQ(launch.world_size, 1);
  EXPECT_EQ(launch.backend, BackendHint::Auto);
}

TEST(Launch, RefusesBadValuesNamingThem) {
  EXPECT_NE(error_of([] { launch_from_environment(env_of({{"RANK", "x"}, {"WORLD_SIZE", "2"}})); }).find("RANK='x'"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              launch_from_environment(env_of({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}}));
            }).find("RANK=2 is not below WORLD_SIZE=2"),
            std::string::npos);
  EXPECT_NE(error_of([] { launch_from_environment(env_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}})); }).find("MASTER_ADDR"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              launch_from_environment(env_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}}));
            }).find("MASTER_PORT=70000"),
            std::string::npos);
  EXPECT_NE(error_of([] { launch_from_environment(env_of({{"DDP_BACKEND", "tcp"}})); }).find("DDP_BACKEND='tcp'"),
            std::string::npos);
  EXPECT_NE(error_of([] { launch_from_environment(env_of({{"SLURM_STEP_NUM_TASKS", "4"}, {"SLURM_PROCID", "1"}})); })
                .find("srun --ddp"),
            std::string::npos);
}

TEST(Cli, ParsesTheSeedsPositionalsAndOptions) {
  const TrainOptions o = parse_train_args({"--batch-size", "64", "--workload=mlp", "--width", "512", "--keep", "2",
                                           "--snapshot-every-seconds", "30", "--momentum", "0.9", "50", "10"},
                                          env_of({{"DDP_SNAPSHOT_DIR", "/shared/snaps"}}));
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
  EXPECT_EQ(parse_train_args({"--snapshot-dir", "/mine", "5", "1"}, env_of({{"DDP_SNAPSHOT_DIR", "/plugin"}})).snapshot_dir,
            "/mine");
  EXPECT_EQ(parse_train_args({"5", "1"}, env_of({})).snapshot_dir, ".");
}

TEST(Cli, RefusesBadInputNamingTheValueAndTheFix) {
  const auto bad = [](std::vector<std::string> args) { return error_of([&] { parse_train_args(args, env_of({})); }); };
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
  testing::write_bytes(dir + "/ok", std::string("\0\0\x08\x02\0\0\0\x02\0\0\0\x03" "abcdef", 18));
  const IdxArray array = read_idx_file(dir + "/ok");
  EXPECT_EQ(array.dims, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(std::string(array.bytes.begin(), array.bytes.end()), "abcdef");
  testing::write_bytes(dir + "/short", std::string("\0\0\x08\x01\0\0\0\x09" "abc", 11));
  EXPECT_NE(error_of([&] { read_idx_file(dir + "/short"); }).find("truncated"), std::string::npos);
  testing::write_bytes(dir + "/gz", "\x1f\x8b\x08\x00");
  EXPECT_NE(error_of([&] { read_idx_file(dir + "/gz"); }).find("gunzip"), std::string::npos);
  EXPECT_NE(error_of([&] { read_idx_file(dir + "/missing"); }).find("cannot open"), std::string::npos);
}

TEST(SnapshotFiles, NamesSortByGlobalStepNewestFirst) {
  const std::string dir = testing::make_temp_dir();
  for (const SnapshotName name : {SnapshotName{2, 64}, SnapshotName{10, 320}, SnapshotName{5, 160}}) {
    testing::write_bytes(join_path(dir, snapshot_file_name(name)), "x");
  }
  testing::write_bytes(dir + "/snapshot.pt", "not ours");
  EXPECT_EQ(snapshot_file_name({10, 320}), "snapshot-e000010-s000000000320.pt");
  EXPECT_EQ(snapshot_paths_newest_first(dir),
            (std::vector<std::string>{dir + "/snapshot-e000010-s000000000320.pt", dir + "/snapshot-e000005-s000000000160.pt",
                                      dir + "/snapshot-e000002-s000000000064.pt"}));
  prune_snapshots(dir, 1);
  EXPECT_EQ(snapshot_paths_newest_first(dir), (std::vector<std::string>{dir + "/snapshot-e000010-s000000000320.pt"}));
}

TEST(SnapshotFiles, AtomicFileAppearsOnlyOnCommit) {
  const std::string dir = testing::make_temp_dir();
  {
    AtomicFile abandoned(dir + "/a.pt");
    abandoned.write("half", 4);
  }
  EXPECT_NE(access((dir + "/a.pt").c_str(), F_OK), 0);
  AtomicFile file(dir + "/b.pt");
  file.write("whole", 5);
  EXPECT_NE(access((dir + "/b.pt").c_str(), F_OK), 0);
  file.commit();
  EXPECT_EQ(testing::read_text(dir + "/b.pt"), "whole");
  EXPECT_EQ(snapshot_paths_newest_first(dir).size(), 0u);
}

TEST(SnapshotFiles, PrepareRemovesStaleTemporariesAndRefusesUnwritableDirectories) {
  const std::string dir = testing::make_temp_dir();
  testing::write_bytes(dir + "/.snapshot-e000001-s000000000001.pt.tmp-12345", "killed mid-write");
  prepare_snapshot_dir(dir + "/new/nested");
  prepare_snapshot_dir(dir);
  EXPECT_NE(access((dir + "/.snapshot-e000001-s000000000001.pt.tmp-12345").c_str(), F_OK), 0);
  struct stat info;
  EXPECT_EQ(stat((dir + "/new/nested").c_str(), &info), 0);
  testing::write_bytes(dir + "/file", "a file, not a directory");
  const std::string message = error_of([&] { prepare_snapshot_dir(dir + "/file/snaps"); });
  EXPECT_NE(message.find(dir + "/file"), std::string::npos) << message;
  EXPECT_NE(message.find("--snapshot-dir"), std::string::npos) << message;
}

}  // namespace
}  // namespace ddp::runtime
