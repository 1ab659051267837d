// ddp-train as users run it: real processes, ranks on 127.0.0.1, its output, exit status and files.
#include <gtest/gtest.h>

#include <ATen/Functions.h>
#include <torch/cuda.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <thread>

#include "ddp_runtime/common/c10d_compat.hpp"
#include "test_common.hpp"
#include "test_support.hpp"

namespace ddp::runtime {
namespace {

using ddp::testing::contains;

using testing::ddp_train;
using testing::Result;
using testing::train_command;

void expect_equal_models(const std::string& a, const std::string& b) {
  const auto first = testing::load_dict(a);
  const auto second = testing::load_dict(b);
  ASSERT_EQ(first.size(), second.size());
  for (const auto& item : first) {
    EXPECT_TRUE(at::equal(item.value().toTensor(), second.at(item.key()).toTensor()))
        << item.key().toStringRef() << " differs between " << a << " and " << b;
  }
}

TEST(DdpTrain, PrintsTheSeedsLinesOnEveryRankAndSavesSnapshotsAndTheFinalModel) {
  const std::string dir = testing::make_temp_dir();
  const auto results = testing::run_ranks(2, train_command(dir, {"3", "2"}), dir, {{"GLOO_SOCKET_IFNAME", "lo"}});
  ASSERT_EQ(results[0].status, 0) << results[0].output;
  ASSERT_EQ(results[1].status, 0) << results[1].output;
  const std::string& rank0 = results[0].output;
  for (const std::string& line : std::vector<std::string>{
           "[CPU0] Epoch 0 | Batchsize: 32 | Steps: 32\n", "[CPU0] Epoch 2 | Batchsize: 32 | Steps: 32\n",
           "Epoch 0 | Training snapshot saved at " + dir + "/snapshots/snapshot-e000001-s000000000032-rdefault.pt\n",
           "Epoch 2 | Training snapshot saved at " + dir + "/snapshots/snapshot-e000003-s000000000096-rdefault.pt\n",
           "Final model saved at " + dir + "/final.pt\n", "Epoch 1 | Loss: ", "samples/s\n"}) {
    EXPECT_TRUE(contains(rank0, line)) << "missing '" << line << "' in\n" << rank0;
  }
  EXPECT_TRUE(contains(results[1].output, "[CPU1] Epoch 2 | Batchsize: 32 | Steps: 32\n")) << results[1].output;
  EXPECT_FALSE(contains(results[1].output, "saved at")) << "only rank 0 writes";
  EXPECT_EQ(testing::load_dict(dir + "/final.pt").at("weight").toTensor().sizes(), (std::vector<int64_t>{1, 20}));
}

// A run that is killed after a snapshot, or stopped by SIGUSR2 in the middle of an epoch, and started again,
// ends with the same final model, bit for bit, as a run that was never interrupted.
TEST(DdpTrain, ResumeIsExactAfterAKillAndAfterSigusr2) {
  const std::vector<std::string> args{"--workload", "mlp", "--width", "32",   "--samples", "1024", "--batch-size", "16",
                                      "--momentum", "0.9", "--lr",    "0.01", "40"};
  const auto with_save_every = [&](const std::string& every) {
    std::vector<std::string> all = args;
    all.push_back(every);
    return all;
  };
  const std::string baseline = testing::make_temp_dir();
  for (const Result& r : testing::run_ranks(2, train_command(baseline, with_save_every("1")), baseline)) {
    ASSERT_EQ(r.status, 0) << r.output;
  }

  const std::string killed = testing::make_temp_dir();
  auto ranks = testing::spawn_ranks(2, train_command(killed, with_save_every("1")), killed);
  ASSERT_TRUE(testing::wait_for_text(ranks[0].output_path, "Epoch 3 | Training snapshot saved", ranks[0]));
  for (const auto& rank : ranks) kill(rank.pid, SIGKILL);
  for (const auto& rank : ranks) EXPECT_EQ(testing::wait_for(rank), 128 + SIGKILL);
  const auto resumed = testing::run_ranks(2, train_command(killed, with_save_every("1")), killed);
  ASSERT_EQ(resumed[0].status, 0) << resumed[0].output;
  EXPECT_TRUE(contains(resumed[0].output, "Resuming training from snapshot at Epoch ")) << resumed[0].output;
  EXPECT_FALSE(contains(resumed[0].output, "[CPU0] Epoch 0 |")) << resumed[0].output;
  expect_equal_models(baseline + "/final.pt", killed + "/final.pt");

  const std::string stopped = testing::make_temp_dir();
  ranks = testing::spawn_ranks(2, train_command(stopped, with_save_every("0")), stopped);
  ASSERT_TRUE(testing::wait_for_text(ranks[0].output_path, "Epoch 2 | Loss", ranks[0]));
  for (const auto& rank : ranks) kill(rank.pid, SIGUSR2);
  for (const auto& rank : ranks) EXPECT_EQ(testing::wait_for(rank), 75) << testing::read_text(rank.output_path);
  EXPECT_TRUE(contains(testing::read_text(ranks[0].output_path), "Training snapshot saved at"));
  EXPECT_TRUE(contains(testing::read_text(ranks[1].output_path), "[CPU1] Stopped at epoch"));
  const auto continued = testing::run_ranks(2, train_command(stopped, with_save_every("0")), stopped);
  ASSERT_EQ(continued[0].status, 0) << continued[0].output;
  expect_equal_models(baseline + "/final.pt", stopped + "/final.pt");

  // SIGTERM, as Slurm sends it at preemption, scancel and the time limit (to every task of the step at once).
  const std::string terminated = testing::make_temp_dir();
  ranks = testing::spawn_ranks(2, train_command(terminated, with_save_every("0")), terminated);
  ASSERT_TRUE(testing::wait_for_text(ranks[0].output_path, "Epoch 2 | Loss", ranks[0]));
  for (const auto& rank : ranks) kill(rank.pid, SIGTERM);
  for (const auto& rank : ranks) EXPECT_EQ(testing::wait_for(rank), 75) << testing::read_text(rank.output_path);
  EXPECT_TRUE(contains(testing::read_text(ranks[0].output_path), "Training snapshot saved at"));
  EXPECT_TRUE(contains(testing::read_text(ranks[1].output_path), " on request (SIGTERM); run the same command"));
  const auto resumed_after_term = testing::run_ranks(2, train_command(terminated, with_save_every("0")), terminated);
  ASSERT_EQ(resumed_after_term[0].status, 0) << resumed_after_term[0].output;
  expect_equal_models(baseline + "/final.pt", terminated + "/final.pt");
}

// Waits until something listens on 127.0.0.1:port, or the process has ended.
bool listening(const std::string& port, const testing::Process& process) {
  for (;;) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(static_cast<uint16_t>(std::stoi(port)));
    const bool connected = connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
    close(fd);
    if (connected) return true;
    if (kill(process.pid, 0) != 0) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// Whether the process has ended (it is not reaped: wait_for still gets its status).
bool ended(const testing::Process& process) {
  siginfo_t info{};
  return waitid(P_PID, static_cast<id_t>(process.pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid != 0;
}

// Whether `signal` is pending for the process (sent, not yet taken by a handler), from /proc/PID/status.
bool signal_pending(pid_t pid, int signal) {
  std::istringstream status(testing::read_text("/proc/" + std::to_string(pid) + "/status"));
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("ShdPnd:", 0) != 0 && line.rfind("SigPnd:", 0) != 0) continue;
    if ((std::stoull(line.substr(7), nullptr, 16) >> (signal - 1)) & 1) return true;
  }
  return false;
}

// A Ctrl-C before the first step (rank 0 waiting for its peer) is a request honoured at the first step boundary; a
// second one ends the process at once, as Ctrl-C did before, for a rank that would otherwise wait for its peers.
TEST(DdpTrain, SigintBeforeTheFirstStepStopsAtItAndASecondSigintEndsTheProcess) {
  const auto rank_env = [](int rank, const std::string& port) {
    return testing::Env{{"RANK", std::to_string(rank)}, {"LOCAL_RANK", std::to_string(rank)}, {"WORLD_SIZE", "2"},
                        {"LOCAL_WORLD_SIZE", "2"},      {"MASTER_ADDR", "127.0.0.1"},         {"MASTER_PORT", port}};
  };
  const std::string dir = testing::make_temp_dir();
  const std::vector<std::string> argv = train_command(dir, {"--timeout", "30", "3", "0"});
  std::string port = std::to_string(testing::free_port());
  const testing::Process rank0 = testing::spawn(argv, rank_env(0, port), dir + "/rank0.log");
  ASSERT_TRUE(listening(port, rank0)) << testing::read_text(rank0.output_path);
  kill(rank0.pid, SIGINT);
  const testing::Process rank1 = testing::spawn(argv, rank_env(1, port), dir + "/rank1.log");
  EXPECT_EQ(testing::wait_at_most(rank0, std::chrono::seconds(60)), 75) << testing::read_text(rank0.output_path);
  EXPECT_EQ(testing::wait_at_most(rank1, std::chrono::seconds(60)), 75) << testing::read_text(rank1.output_path);
  EXPECT_TRUE(contains(testing::read_text(rank0.output_path),
                       "[CPU0] Stopped at epoch 0, batch 1 on request (SIGINT); run the same command to resume"))
      << testing::read_text(rank0.output_path);
  EXPECT_TRUE(contains(testing::read_text(rank1.output_path), "[CPU1] Stopped at epoch 0, batch 1 on request; run"))
      << testing::read_text(rank1.output_path);

  port = std::to_string(testing::free_port());
  const testing::Process alone = testing::spawn(argv, rank_env(0, port), dir + "/alone.log");
  ASSERT_TRUE(listening(port, alone)) << testing::read_text(alone.output_path);
  kill(alone.pid, SIGINT);
  // Two SIGINTs sent at once would merge into one: the second goes once the first has been taken.
  while (signal_pending(alone.pid, SIGINT) && !ended(alone)) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  kill(alone.pid, SIGINT);
  EXPECT_EQ(testing::wait_at_most(alone, std::chrono::seconds(10)), 128 + SIGINT)
      << testing::read_text(alone.output_path);
}

// An error the system reports while a snapshot is read (a failing disk, a soft NFS mount timing out, a stale handle
// after a failover, no descriptors left) says nothing about the file: the start fails with one line naming the file
// and the error, nothing is renamed, and the next start resumes from that very snapshot.
TEST(DdpTrain, AnIoErrorReadingASnapshotFailsTheStartAndSetsNothingAside) {
  const std::string dir = testing::make_temp_dir();
  ASSERT_EQ(testing::run(train_command(dir, {"2", "1"})).status, 0);
  const auto listing = [&] {
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(dir + "/snapshots")) {
      names.push_back(entry.path().filename());
    }
    std::sort(names.begin(), names.end());
    return names;
  };
  const std::vector<std::string> before = listing();
  ASSERT_EQ(before.size(), 2u);
  const std::string newest = dir + "/snapshots/" + before.back();
  struct Fault {
    std::string call;
    int error;
    std::string after;  // bytes read before the error
  };
  for (const Fault& fault : {Fault{"read", EIO, "0"}, Fault{"read", ESTALE, "100"}, Fault{"open", EMFILE, "0"}}) {
    const Result started =
        testing::run(train_command(dir, {"3", "1"}), {{"LD_PRELOAD", IO_FAULT_LIBRARY},
                                                      {"IO_FAULT_PATH", before.back()},
                                                      {"IO_FAULT_CALL", fault.call},
                                                      {"IO_FAULT_ERRNO", std::to_string(fault.error)},
                                                      {"IO_FAULT_AFTER", fault.after}});
    const std::string why = fault.call + " " + std::strerror(fault.error) + ":\n" + started.output;
    EXPECT_EQ(started.status, 1) << why;
    EXPECT_TRUE(contains(started.output, "ddp-train: cannot " + fault.call + " snapshot " + newest + ": " +
                                             std::strerror(fault.error) + " (errno " + std::to_string(fault.error) +
                                             "); it is left as it is"))
        << why;
    EXPECT_EQ(testing::own_lines(started.output), 1u) << why;
    EXPECT_FALSE(contains(started.output, "Epoch")) << why;
    EXPECT_EQ(listing(), before) << why;
  }
  const Result resumed = testing::run(train_command(dir, {"3", "1"}));
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_TRUE(contains(resumed.output, "Resuming training from snapshot at Epoch 2 (" + newest + ")"))
      << resumed.output;
}

// Ranks other than 0 start from the bytes rank 0 read, not from whatever they find at its path: here each rank runs
// in a directory of its own with a relative --snapshot-dir, and rank 1's holds a snapshot of the same name written
// with another learning rate (as a swapped directory, or another node's view of it, would show it).
TEST(DdpTrain, OtherRanksStartFromWhatRankZeroReadNotFromWhatTheyFindAtItsPath) {
  const std::string dir = testing::make_temp_dir();
  const std::vector<std::string> common{"--run-id", "r", "--momentum", "0.9", "--keep", "5"};
  const auto write_snapshot = [&](const std::string& where, const std::string& lr) {
    std::vector<std::string> args = common;
    args.insert(args.end(), {"--snapshot-dir", where, "--output", where + "/final.pt", "--lr", lr, "1", "1"});
    args.insert(args.begin(), ddp_train());
    return testing::run(args);
  };
  for (const char* rank : {"rank0", "rank1", "clean"}) std::filesystem::create_directory(dir + "/" + rank);
  const Result first = write_snapshot(dir + "/rank0/snaps", "0.01");
  ASSERT_EQ(first.status, 0) << first.output;
  const Result other = write_snapshot(dir + "/rank1/snaps", "0.02");
  ASSERT_EQ(other.status, 0) << other.output;
  std::filesystem::copy(dir + "/rank0/snaps", dir + "/clean/snaps");
  std::filesystem::remove(dir + "/clean/snaps/final.pt");

  std::vector<std::string> resume{
      ddp_train(), "--output", dir + "/clean/final.pt", "--snapshot-dir", dir + "/clean/snaps", "--lr", "0.01"};
  resume.insert(resume.end(), common.begin(), common.end());
  resume.insert(resume.end(), {"3", "1"});
  for (const Result& r : testing::run_ranks(2, resume, dir)) ASSERT_EQ(r.status, 0) << r.output;

  std::vector<std::string> in_own_dirs{"/bin/sh",
                                       "-c",
                                       "cd \"$0/rank$RANK\" && exec \"$@\"",
                                       dir,
                                       ddp_train(),
                                       "--output",
                                       dir + "/final.pt",
                                       "--snapshot-dir",
                                       "snaps",
                                       "--lr",
                                       "0.01"};
  in_own_dirs.insert(in_own_dirs.end(), common.begin(), common.end());
  in_own_dirs.insert(in_own_dirs.end(), {"3", "1"});
  const auto results = testing::run_ranks(2, in_own_dirs, dir);
  for (const Result& r : results) ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(contains(results[0].output, "Resuming training from snapshot at Epoch 1 (snaps/")) << results[0].output;
  expect_equal_models(dir + "/clean/final.pt", dir + "/final.pt");
}

// When a peer dies, a surviving rank ends with status 1 and a message, not silently by SIGPIPE on its socket.
TEST(DdpTrain, ASurvivingRankReportsItsLostPeerAndExitsWithStatus1) {
  const std::string dir = testing::make_temp_dir();
  auto ranks = testing::spawn_ranks(2, train_command(dir, {"--workload", "mlp", "--width", "64", "1000", "0"}), dir);
  ASSERT_TRUE(testing::wait_for_text(ranks[0].output_path, "Epoch 1 | Loss", ranks[0]));
  kill(ranks[1].pid, SIGKILL);
  EXPECT_EQ(testing::wait_for(ranks[1]), 128 + SIGKILL);
  EXPECT_EQ(testing::wait_at_most(ranks[0], std::chrono::seconds(60)), 1) << testing::read_text(ranks[0].output_path);
  EXPECT_TRUE(contains(testing::read_text(ranks[0].output_path), "ddp-train: "))
      << testing::read_text(ranks[0].output_path);
}

TEST(DdpTrain, ResumesFromASnapshotWrittenByTheSeedScript) {
  const std::string python = testing::torch_python();
  if (python.empty()) GTEST_SKIP() << "Debian's python3-torch is not installed";
  const std::string dir = testing::make_temp_dir();
  const std::string seed_snapshot = dir + "/snapshot.pt";
  ASSERT_EQ(testing::run({python, testing::python_script("snapshot_io.py"), "write-seed", seed_snapshot, "2"}).status,
            0);

  const Result unchanged = testing::run(train_command(dir, {"--resume", seed_snapshot, "2", "1"}));
  ASSERT_EQ(unchanged.status, 0) << unchanged.output;
  EXPECT_TRUE(contains(unchanged.output, "Resuming training from snapshot at Epoch 2 (" + seed_snapshot + ")"));
  EXPECT_FALSE(contains(unchanged.output, "[CPU0] Epoch")) << "all epochs had run";
  const auto python_model = testing::load_dict(seed_snapshot).at("MODEL_STATE").toGenericDict();
  const auto final_model = testing::load_dict(dir + "/final.pt");
  for (const std::string name : {"weight", "bias"}) {
    EXPECT_TRUE(at::equal(python_model.at(name).toTensor(), final_model.at(name).toTensor())) << name;
  }

  const Result trained = testing::run(train_command(dir, {"--resume", seed_snapshot, "3", "1"}));
  ASSERT_EQ(trained.status, 0) << trained.output;
  EXPECT_TRUE(contains(trained.output, "[CPU0] Epoch 2 | Batchsize: 32 | Steps: 64\n")) << trained.output;
  EXPECT_FALSE(contains(trained.output, "[CPU0] Epoch 1 |")) << trained.output;
}

// The seed's own _load_snapshot (torch.load(path) with the defaults: weights_only=True from PyTorch 2.6 on).
TEST(DdpTrain, TheSeedScriptResumesFromItsSnapshotAndFinalModel) {
  const std::string python = testing::torch_python();
  if (python.empty()) GTEST_SKIP() << "Debian's python3-torch is not installed";
  const std::string dir = testing::make_temp_dir();
  ASSERT_EQ(testing::run(train_command(dir, {"--momentum", "0.9", "2", "1"})).status, 0);
  const std::string snapshot = dir + "/snapshots/snapshot-e000002-s000000000128-rdefault.pt";
  const Result resumed = testing::run({python, testing::python_script("snapshot_io.py"), "seed-resume", snapshot});
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_TRUE(contains(resumed.output, "Resuming training from snapshot at Epoch 2\n")) << resumed.output;
  char weight_sum[64];
  std::snprintf(
      weight_sum, sizeof weight_sum, "weight_sum %.4f\n",
      testing::load_dict(snapshot).at("MODEL_STATE").toGenericDict().at("weight").toTensor().sum().item<double>());
  EXPECT_TRUE(contains(resumed.output, weight_sum)) << resumed.output;
  const Result final_model = testing::run(
      {python, "-c",
       "import torch, sys; m = torch.nn.Linear(20, 1); m.load_state_dict(torch.load(sys.argv[1])); print('ok')",
       dir + "/final.pt"});
  EXPECT_EQ(final_model.output, "ok\n");
}

TEST(DdpTrain, RefusesASnapshotOfAnotherModelNamingTheFirstMismatchingTensor) {
  const std::string dir = testing::make_temp_dir();
  ASSERT_EQ(testing::run(train_command(dir, {"--workload", "mlp", "--width", "8", "--samples", "64", "1", "1"})).status,
            0);
  const Result wider =
      testing::run(train_command(dir, {"--workload", "mlp", "--width", "16", "--samples", "64", "2", "1"}));
  EXPECT_EQ(wider.status, 2) << wider.output;
  EXPECT_TRUE(contains(wider.output, "'0.weight' is [8, 20] in the snapshot but [16, 20] in the model"))
      << wider.output;
  EXPECT_FALSE(contains(wider.output, "[CPU0] Epoch")) << wider.output;
}

// A resume with other optimizer options than the snapshot was written with says which, in one line; the same ones
// say nothing.
TEST(DdpTrain, AResumeWithOtherHyperparametersSaysWhich) {
  const std::string dir = testing::make_temp_dir();
  const auto train = [&](std::vector<std::string> more, const std::string& epochs) {
    std::vector<std::string> args{"--workload", "mlp", "--width", "8", "--samples", "64", "--run-id", "hp"};
    args.insert(args.end(), more.begin(), more.end());
    args.insert(args.end(), {epochs, "1"});
    return testing::run(train_command(dir, args));
  };
  ASSERT_EQ(train({"--lr", "0.01"}, "1").status, 0);
  const Result same = train({"--lr", "0.01"}, "2");
  ASSERT_EQ(same.status, 0) << same.output;
  EXPECT_TRUE(contains(same.output, "Resuming training from snapshot at Epoch 1")) << same.output;
  EXPECT_FALSE(contains(same.output, "other hyperparameters")) << same.output;
  const Result other = train({"--lr", "0.05", "--momentum", "0.9"}, "3");
  ASSERT_EQ(other.status, 0) << other.output;
  EXPECT_TRUE(contains(other.output,
                       "Resuming with other hyperparameters than the snapshot was written with: "
                       "--lr 0.05 (0.01 in the snapshot), --momentum 0.9 (0 in the snapshot); they "
                       "apply from here on"))
      << other.output;
  const Result adamw = train({"--optimizer", "adamw"}, "4");
  EXPECT_EQ(adamw.status, 2) << adamw.output;
  EXPECT_TRUE(contains(adamw.output, "holds the state of --optimizer sgd, this run has --optimizer adamw"))
      << adamw.output;
}

// Job ids are not runs: they start again at 1 on a rebuilt cluster and wrap at MaxJobId, and the default snapshot
// directory (%x-%j) then holds an old job's snapshots. A new job with the same id (another DDP_JOB_INSTANCE, which
// srun --ddp gives each job) trains from the start, with its own --lr, and leaves the old job's snapshots alone; the
// old job, requeued (its instance again), still resumes its own. Snapshots of a job without an instance (an older
// ddp-train) are another run too.
TEST(DdpTrain, AJobThatReusesAJobIdIsAnotherRunAndARequeuedJobIsTheSame) {
  const std::string dir = testing::make_temp_dir();
  const std::string snapshots = dir + "/snapshots";
  const auto train = [&](const std::string& instance, const std::string& lr, const std::string& epochs) {
    testing::Env env{{"SLURM_JOB_ID", "4711"}};
    if (!instance.empty()) env["DDP_JOB_INSTANCE"] = instance;
    return testing::run(train_command(dir, {"--workload", "mlp", "--width", "8", "--samples", "64", "--keep", "1",
                                            "--lr", lr, epochs, "1"}),
                        env);
  };
  const Result old_job = train("0a1b2c3d4e5f", "0.01", "2");
  ASSERT_EQ(old_job.status, 0) << old_job.output;
  const Result new_job = train("9f8e7d6c5b4a", "0.5", "3");
  ASSERT_EQ(new_job.status, 0) << new_job.output;
  EXPECT_TRUE(contains(new_job.output,
                       "holds snapshots of other runs (4711-0a1b2c3d4e5f); run 4711-9f8e7d6c5b4a "
                       "starts afresh and leaves them alone"))
      << new_job.output;
  EXPECT_FALSE(contains(new_job.output, "Resuming")) << new_job.output;
  EXPECT_TRUE(contains(new_job.output, "Epoch 0 | Loss")) << new_job.output;
  const Result requeued = train("0a1b2c3d4e5f", "0.01", "4");
  ASSERT_EQ(requeued.status, 0) << requeued.output;
  EXPECT_TRUE(contains(requeued.output, "Resuming training from snapshot at Epoch 2 (" + snapshots +
                                            "/snapshot-e000002-s000000000004-r4711-0a1b2c3d4e5f.pt)"))
      << requeued.output;
  const Result without_instance = train("", "0.01", "1");
  ASSERT_EQ(without_instance.status, 0) << without_instance.output;
  EXPECT_FALSE(contains(without_instance.output, "Resuming")) << without_instance.output;
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(snapshots)) names.push_back(entry.path().filename());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"snapshot-e000001-s000000000002-r4711.pt",
                                             "snapshot-e000003-s000000000006-r4711-9f8e7d6c5b4a.pt",
                                             "snapshot-e000004-s000000000008-r4711-0a1b2c3d4e5f.pt"}));
}

// Other files in the snapshot directory, as users meet them: two runs in one directory and a junk file with a
// higher step number.
TEST(DdpTrain, RunsSharingADirectoryKeepTheirOwnSnapshotsAndJunkIsSetAside) {
  const std::string dir = testing::make_temp_dir();
  const std::string snapshots = dir + "/snapshots";
  const auto train = [&](const std::string& run, const std::string& epochs) {
    return testing::run(train_command(
        dir, {"--workload", "mlp", "--width", "8", "--samples", "64", "--keep", "1", "--run-id", run, epochs, "1"}));
  };
  ASSERT_EQ(train("a", "2").status, 0);
  const Result b = train("b", "3");
  ASSERT_EQ(b.status, 0) << b.output;
  EXPECT_TRUE(contains(b.output, "holds snapshots of other runs (a); run b starts afresh")) << b.output;
  EXPECT_FALSE(contains(b.output, "Resuming")) << b.output;
  testing::write_bytes(snapshots + "/snapshot-e000999-s000000999999-ra.pt", "junk with a higher step");
  const Result a = train("a", "4");
  ASSERT_EQ(a.status, 0) << a.output;
  EXPECT_TRUE(contains(a.output, "snapshot-e000999-s000000999999-ra.pt is not a whole snapshot")) << a.output;
  EXPECT_TRUE(contains(
      a.output, "Resuming training from snapshot at Epoch 2 (" + snapshots + "/snapshot-e000002-s000000000004-ra.pt)"))
      << a.output;
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(snapshots)) names.push_back(entry.path().filename());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names,
            (std::vector<std::string>{"snapshot-e000003-s000000000006-rb.pt", "snapshot-e000004-s000000000008-ra.pt",
                                      "snapshot-e000999-s000000999999-ra.pt.corrupt"}));
}

TEST(DdpTrain, FailsOnEveryRankBeforeTheFirstStepWhenTheSnapshotDirIsUnwritable) {
  const std::string dir = testing::make_temp_dir();
  testing::write_bytes(dir + "/not-a-dir", "x");
  const auto results = testing::run_ranks(
      2, {ddp_train(), "--snapshot-dir", dir + "/not-a-dir/snaps", "--output", dir + "/f.pt", "2", "1"}, dir);
  for (const Result& r : results) {
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_TRUE(contains(r.output, dir + "/not-a-dir")) << r.output;
    EXPECT_FALSE(contains(r.output, "Epoch")) << r.output;
  }
}

TEST(DdpTrain, RefusesBadInputWithOneLineAndExitStatus2) {
  const std::string dir = testing::make_temp_dir();
  const auto expect_refused = [&](const std::vector<std::string>& args, const testing::Env& env,
                                  const std::string& part) {
    const Result result = testing::run(train_command(dir, args), env);
    EXPECT_EQ(result.status, 2) << result.output;
    EXPECT_TRUE(contains(result.output, part)) << result.output;
    EXPECT_EQ(testing::own_lines(result.output), 1u) << result.output;
  };
  expect_refused({"--batch-size", "abc", "5", "1"}, {}, "ddp-train: --batch-size 'abc' is not a whole number");
  expect_refused({"5"}, {}, "usage: ddp-train [options] total_epochs save_every");
#ifdef DDP_WITH_MPI
  // Started without mpirun, each rank is a lone MPI process: MPI and the environment disagree.
  expect_refused(
      {"5", "1"},
      {{"DDP_BACKEND", "mpi"}, {"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "1"}},
      "MPI started this process as rank 0 of 1 but the launcher's environment says rank 1 of 2");
#else
  expect_refused({"5", "1"}, {{"DDP_BACKEND", "mpi"}}, "the MPI process group is not built");
#endif
  // A CUDA LibTorch on a machine without a GPU (CI's NCCL build) refuses too, before any rendezvous.
  if (!compat::nccl_built()) {
    expect_refused({"--backend", "nccl", "5", "1"}, {}, "NCCL backend is not built");
  } else if (!torch::cuda::is_available()) {
    expect_refused({"--backend", "nccl", "5", "1"}, {},
                   "backend nccl needs a GPU, and no CUDA device is visible; use --backend gloo (DDP_BACKEND=gloo)");
  }
  expect_refused({"5", "1"}, {{"RANK", "2"}, {"WORLD_SIZE", "2"}}, "RANK '2' is not below WORLD_SIZE 2");
  expect_refused({"--workload", "fashion-mnist", "--data", dir, "5", "1"}, {}, "has no train-images-idx3-ubyte");
}

std::string idx_header(std::vector<uint32_t> dims) {
  std::string header{'\0', '\0', '\x08', static_cast<char>(dims.size())};
  for (const uint32_t d : dims) {
    for (int shift = 24; shift >= 0; shift -= 8) header += static_cast<char>((d >> shift) & 0xff);
  }
  return header;
}

TEST(DdpTrain, TrainsTheQuickstartNetworkOnFashionMnistIdxFiles) {
  const std::string dir = testing::make_temp_dir();
  const uint32_t images = 96;
  std::string pixels(images * 28 * 28, '\0');
  std::string labels(images, '\0');
  for (std::size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<char>((i * 37) % 256);
  for (uint32_t i = 0; i < images; ++i) labels[i] = static_cast<char>(i % 10);
  testing::write_bytes(dir + "/train-images-idx3-ubyte", idx_header({images, 28, 28}) + pixels);
  testing::write_bytes(dir + "/train-labels-idx1-ubyte", idx_header({images}) + labels);
  const Result result = testing::run(train_command(dir, {"--workload", "fashion-mnist", "--data", dir, "2", "1"}));
  ASSERT_EQ(result.status, 0) << result.output;
  EXPECT_TRUE(contains(result.output, "[CPU0] Epoch 1 | Batchsize: 32 | Steps: 3\n")) << result.output;
  EXPECT_EQ(testing::load_dict(dir + "/final.pt").at("linear_relu_stack.0.weight").toTensor().sizes(),
            (std::vector<int64_t>{512, 784}));
}

}  // namespace
}  // namespace ddp::runtime
