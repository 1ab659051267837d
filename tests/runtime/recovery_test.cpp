// Recovery in place (ddp-train --recover in-place): real ddp-train ranks on this machine, one killed or stopped while
// they train. The others go on without a restart; a stopped rank that comes back finds itself left out; below
// --min-ranks the ranks write a snapshot and end, and a restart resumes from it bit for bit. How fast recovery is, is
// measured in bench/recovery_bench.sh, not here.
#include <gtest/gtest.h>
#include <signal.h>
#include <torch/version.h>

#include <filesystem>
#include <iostream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/netif.hpp"
#include "core/redact.hpp"
#include "ddp_runtime/distributed/project_store.hpp"
#include "store/store.hpp"
#include "test_common.hpp"
#include "test_support.hpp"

namespace ddp::runtime {
namespace {

using ddp::testing::contains;
using testing::Process;

// LibTorch 1.13's store client ends the process when its store's host dies: there, --recover in-place is refused
// (LibTorch1.RecoverInPlaceIsRefusedWithTheReason) and these tests skip.
//
// Every test's runs leave no key material (core/redact.hpp) in what they printed or wrote: TearDown reads every text
// file of their directories (the ranks' and replacements' output, the group file but its seal, error files), after
// each failure path these tests take (a rank killed, stopped, a replacement killed while taken in, a fallback).
class RecoverInPlace : public ::testing::Test {
 protected:
  void SetUp() override {
#if TORCH_VERSION_MAJOR < 2
    GTEST_SKIP() << "recovery in place needs LibTorch 2.x; this is " << TORCH_VERSION_MAJOR << "."
                 << TORCH_VERSION_MINOR;
#endif
  }
  void TearDown() override {
    static const std::regex key_material("[0-9a-fA-F]{" + std::to_string(kKeyMaterialDigits) + ",}");
    for (const std::string& dir : dirs_) {
      for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
        if (!entry.is_regular_file() || entry.path().extension() == ".pt") continue;
        std::string text = testing::read_text(entry.path());
        // The group file opens with its seal, a MAC: no secret (it gives neither the key nor a key's name).
        if (entry.path().filename().string().rfind(".ddp-group-", 0) == 0) text.erase(0, text.find('\n') + 1);
        std::smatch found;
        if (text.find('\0') == std::string::npos && std::regex_search(text, found, key_material)) {
          ADD_FAILURE() << entry.path() << " holds key material: " << found.str();
        }
      }
    }
  }
  // A directory for a run's snapshots and output, read again at the end of the test.
  std::string run_dir() { return dirs_.emplace_back(testing::make_temp_dir()); }

 private:
  std::vector<std::string> dirs_;
};

// Kills every rank still running when the test ends, also when an assertion ended it early.
struct Ranks {
  std::vector<Process> processes;
  Ranks() = default;
  Ranks(const Ranks&) = delete;
  Ranks& operator=(const Ranks&) = delete;
  ~Ranks() {
    if (::testing::Test::HasFailure()) {
      for (const Process& p : processes) {
        std::cerr << "----- " << p.output_path << " (without the lines of each step):\n";
        std::istringstream lines(testing::read_text(p.output_path));
        for (std::string line; std::getline(lines, line);) {
          if (!contains(line, "| Batchsize: ")) std::cerr << line << "\n";
        }
      }
    }
    for (const Process& p : processes) {
      kill(-p.pid, SIGKILL);
      kill(-p.pid, SIGCONT);
    }
    for (const Process& p : processes) testing::wait_at_most(p, std::chrono::seconds(10));
  }
  const Process& operator[](std::size_t i) const { return processes[i]; }
};

std::vector<std::string> recovering_run(const std::string& dir, const std::vector<std::string>& more) {
  return testing::mlp_command(dir, "64",
                              testing::with({"--samples", "4096", "--recover", "in-place", "--timeout", "4"}, more));
}

// The loss rank 0 printed for the run's last epoch.
double last_loss(const std::string& output) {
  static const std::regex loss("Epoch [0-9]+ \\| Loss: ([0-9.e+-]+)");
  double value = -1;
  for (auto it = std::sregex_iterator(output.begin(), output.end(), loss); it != std::sregex_iterator(); ++it) {
    value = std::stod((*it)[1].str());
  }
  return value;
}

// Starts `count` ranks; once rank `watch` has begun epoch 3, `victim` gets `signal`.
void start_and_signal(Ranks& ranks, const std::string& dir, int count, int victim, int signal,
                      const std::vector<std::string>& more, int watch = 0) {
  ranks.processes = testing::spawn_ranks(count, recovering_run(dir, more), dir);
  EXPECT_TRUE(testing::wait_for_text(ranks[watch].output_path, "] Epoch 3 | Batchsize", ranks[watch]))
      << testing::read_text(ranks[watch].output_path);
  kill(ranks[victim].pid, signal);
}

// The survivor that leads the next generation is the one with the newest state (the most steps, the lowest rank
// among equals): under load the step in flight may have ended on one survivor and not on another, so any of
// `survivors` may be rank 0 after a recovery. Returns the index of the first whose output shows `text` (what rank 0
// prints), within `limit`; fails the test when none does.
std::size_t printed_by(const Ranks& ranks, const std::vector<std::size_t>& survivors, const std::string& text,
                       std::chrono::seconds limit = std::chrono::seconds(120)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  std::string outputs;
  do {
    outputs.clear();
    for (const std::size_t i : survivors) {
      const std::string output = testing::read_text(ranks[i].output_path);
      if (contains(output, text)) return i;
      outputs += "\nrank " + std::to_string(i) + ":\n" + output;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  } while (std::chrono::steady_clock::now() < deadline);
  ADD_FAILURE() << "no survivor printed '" << text << "' within " << limit.count() << " s:" << outputs;
  return survivors.front();
}

TEST_F(RecoverInPlace, AKilledRankIsLeftBehindAndTheOthersTrainToTheEnd) {
  const std::string dir = run_dir();
  Ranks ranks;
  start_and_signal(ranks, dir, 3, 1, SIGKILL, {"12", "0"});
  EXPECT_EQ(testing::wait_at_most(ranks[0], std::chrono::seconds(120)), 0);
  EXPECT_EQ(testing::wait_at_most(ranks[2], std::chrono::seconds(30)), 0);
  EXPECT_EQ(testing::wait_for(ranks[1]), 128 + SIGKILL);
  const std::size_t leader =
      printed_by(ranks, {0, 2}, "Recovered in place: rank 1 on " + host_name() + " (cpu) lost (");
  const std::string output = testing::read_text(ranks[leader].output_path);
  EXPECT_TRUE(contains(output, "); 2 ranks went on from step ")) << output;
  EXPECT_TRUE(contains(output, "Epoch 11 | Loss")) << output;
  EXPECT_TRUE(contains(output, "Final model saved at " + dir + "/final.pt")) << output;
  EXPECT_TRUE(contains(output, "ddp-train: training completed in place by 2 of the 3 ranks it started with")) << output;
  const std::size_t other = leader == 0 ? 2 : 0;
  EXPECT_FALSE(contains(testing::read_text(ranks[other].output_path), "ddp-train:"))
      << "the other survivor reported no error";
}

// Rank 0 hosts the first store and writes the snapshots: the next rank takes both over.
TEST_F(RecoverInPlace, RankZeroKilledTheNextRankLeadsAndWritesTheModel) {
  const std::string dir = run_dir();
  Ranks ranks;
  start_and_signal(ranks, dir, 3, 0, SIGKILL, {"12", "4"}, 1);
  EXPECT_EQ(testing::wait_at_most(ranks[1], std::chrono::seconds(120)), 0);
  EXPECT_EQ(testing::wait_at_most(ranks[2], std::chrono::seconds(30)), 0);
  const std::size_t leader =
      printed_by(ranks, {1, 2}, "Recovered in place: rank 0 on " + host_name() + " (cpu) lost (");
  const std::string output = testing::read_text(ranks[leader].output_path);
  EXPECT_TRUE(contains(output, "Epoch 8 | Training snapshot saved at " + dir + "/snapshot-")) << output;
  EXPECT_TRUE(contains(output, "Final model saved at " + dir + "/final.pt")) << output;
}

// The run's group file in `dir` (its name holds the run id).
std::string group_file_in(const std::string& dir) {
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().filename().string().rfind(".ddp-group-", 0) == 0) return entry.path();
  }
  return dir + "/.ddp-group-missing";
}

// The standby endpoint of `rank` in the group file rank 0 wrote ("ID\tHOST PORT" lines after the seal and header).
uint16_t standby_port_in(const std::string& group_file, int rank) {
  std::istringstream lines(testing::read_text(group_file));
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(std::to_string(rank) + "\t", 0) == 0) {
      return static_cast<uint16_t>(std::stoi(line.substr(line.rfind(' ') + 1)));
    }
  }
  return 0;
}

// A program that takes the dead leader's freed standby port and speaks the store's protocol perfectly, but for
// another job's key, cannot pass for it: the survivors' probe asks it to answer a fresh nonce under the job's key, it
// cannot, and the next rank leads. Nothing is stored in it, and it learns no key's name.
TEST_F(RecoverInPlace, AStoreOnTheDeadLeadersFreedStandbyPortIsNotBelieved) {
  const std::string dir = run_dir();
  Ranks ranks;
  ranks.processes = testing::spawn_ranks(3, recovering_run(dir, {"12", "4"}), dir);
  ASSERT_TRUE(testing::wait_for_text(ranks[1].output_path, "] Epoch 3 | Batchsize", ranks[1]));
  const uint16_t port = standby_port_in(group_file_in(dir), 0);
  ASSERT_NE(port, 0) << testing::read_text(group_file_in(dir));
  kill(ranks[0].pid, SIGKILL);
  ASSERT_EQ(testing::wait_for(ranks[0]), 128 + SIGKILL);
  StoreServer impostor("", port, Admission{standby_run("default"), 0, std::string(32, 'e'), false});
  EXPECT_EQ(testing::wait_at_most(ranks[1], std::chrono::seconds(120)), 0);
  EXPECT_EQ(testing::wait_at_most(ranks[2], std::chrono::seconds(30)), 0);
  const std::size_t leader =
      printed_by(ranks, {1, 2}, "Recovered in place: rank 0 on " + host_name() + " (cpu) lost (");
  EXPECT_TRUE(contains(testing::read_text(ranks[leader].output_path), "Final model saved at " + dir + "/final.pt"));
  EXPECT_EQ(impostor.stored_bytes(), 0u) << "a client that proved no key stored nothing";
}

// A stopped rank fails the others' collective at --timeout; they go on without it, and when it runs again it finds a
// newer generation without it and ends.
TEST_F(RecoverInPlace, AStoppedRankIsLeftOutAndEndsWhenItComesBack) {
  const std::string dir = run_dir();
  Ranks ranks;
  start_and_signal(ranks, dir, 3, 2, SIGSTOP, {"40", "0"});
  const std::size_t leader = printed_by(ranks, {0, 1}, "Recovered in place");
  kill(ranks[2].pid, SIGCONT);
  EXPECT_EQ(testing::wait_at_most(ranks[2], std::chrono::seconds(60)), 1);
  EXPECT_EQ(testing::wait_at_most(ranks[0], std::chrono::seconds(120)), 0);
  EXPECT_EQ(testing::wait_at_most(ranks[1], std::chrono::seconds(30)), 0);
  const std::string output = testing::read_text(ranks[leader].output_path);
  EXPECT_TRUE(contains(output, "Recovered in place: rank 2 on " + host_name() + " (cpu) lost (")) << output;
  const std::string stopped = testing::read_text(ranks[2].output_path);
  EXPECT_TRUE(contains(stopped, "ddp-train: rank 2 on " + host_name() + " (cpu) was left out: the other ranks went on"))
      << stopped;
}

// Every file in `dir` but the ranks' logs, each with its content: what a run leaves for its user.
std::map<std::string, std::string> run_files(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".log") files[entry.path().filename()] = testing::read_text(entry.path());
  }
  return files;
}

// A stopped rank that comes back only after the others have ended the run finds every member gone, as if they had
// all been killed: the group file says the run ended, so it is left out, and writes nothing over the run's model or
// snapshots with its old state (seen before the group file was read: it trained on alone and saved its model).
TEST_F(RecoverInPlace, AStoppedRankThatComesBackAfterTheRunEndedIsLeftOutAndWritesNothing) {
  const std::string dir = run_dir();
  Ranks ranks;
  start_and_signal(ranks, dir, 3, 2, SIGSTOP, {"12", "4"});
  EXPECT_EQ(testing::wait_at_most(ranks[0], std::chrono::seconds(120)), 0);
  EXPECT_EQ(testing::wait_at_most(ranks[1], std::chrono::seconds(30)), 0);
  const std::map<std::string, std::string> left = run_files(dir);
  ASSERT_EQ(left.count("final.pt"), 1u) << "the survivors saved the model";
  kill(ranks[2].pid, SIGCONT);
  EXPECT_EQ(testing::wait_at_most(ranks[2], std::chrono::seconds(60)), 1);
  const std::string stopped = testing::read_text(ranks[2].output_path);
  EXPECT_TRUE(contains(stopped, "ddp-train: rank 2 on " + host_name() +
                                    " (cpu) was left out: the other ranks went on without it and ended the run ("))
      << stopped;
  EXPECT_TRUE(run_files(dir) == left) << "the model, the snapshots and the group file are as the survivors left them";
}

// The group file is the witness that the run ended or went on: a survivor that reads "ended" there gives up. One
// written over by someone else (an old ddp-train, another job, a user's mistake) is not sealed with the job's key:
// the survivors do not take it for the run's end and train on.
TEST_F(RecoverInPlace, AGroupFileNotSealedWithTheJobsKeyIsNotBelieved) {
  const std::string dir = run_dir();
  Ranks ranks;
  ranks.processes = testing::spawn_ranks(3, recovering_run(dir, {"12", "0"}), dir);
  ASSERT_TRUE(testing::wait_for_text(ranks[0].output_path, "] Epoch 3 | Batchsize", ranks[0]));
  const std::string group_file = group_file_in(dir);
  ASSERT_TRUE(contains(testing::read_text(group_file), "ddp-train group 0\n")) << group_file;
  testing::write_bytes(group_file, "ddp-train group ended\n");
  kill(ranks[1].pid, SIGKILL);
  EXPECT_EQ(testing::wait_at_most(ranks[0], std::chrono::seconds(120)), 0);
  EXPECT_EQ(testing::wait_at_most(ranks[2], std::chrono::seconds(30)), 0);
  const std::size_t leader = printed_by(ranks, {0, 2}, "Recovered in place: rank 1 on ");
  EXPECT_TRUE(contains(testing::read_text(ranks[leader].output_path), "Final model saved at "));
}

// A replacement reads the group file to find rank 0: one not sealed with the job's key (here pointing at a port
// someone else listens on) is not used, and the replacement says why.
TEST_F(RecoverInPlace, AReplacementRefusesAGroupFileNotSealedWithTheJobsKey) {
  const std::string dir = run_dir();
  testing::write_bytes(dir + "/.ddp-group-default",
                       "ddp-train group 7\n0\t127.0.0.1 " + std::to_string(testing::free_port()) + "\n");
  std::vector<std::string> replacement = recovering_run(dir, {"2", "0"});
  replacement.insert(replacement.end(), {"--join", "--timeout", "1"});
  Ranks alone;
  alone.processes.push_back(testing::spawn(replacement, {}, dir + "/replacement.log"));
  EXPECT_EQ(testing::wait_at_most(alone[0], std::chrono::seconds(60)), 1);
  const std::string output = testing::read_text(dir + "/replacement.log");
  EXPECT_TRUE(contains(output, "this replacement could not join the run: " + dir +
                                   "/.ddp-group-default is not sealed with this job's key (another job wrote it, or "
                                   "it was changed): it was not used"))
      << output;
  EXPECT_FALSE(contains(output, "Replacement: asked rank")) << output;
}

// Ends every rank of a run that trains on (epochs without end) with SIGUSR2: they agree to stop at a step boundary,
// rank 0 writes a snapshot, and all exit with 75.
void stop_all(const Ranks& ranks) {
  for (const Process& p : ranks.processes) kill(p.pid, SIGUSR2);
}

// 3 ranks that train without end, rank 1 SIGKILLed and left behind, then a replacement (--join, its output in
// dir/replacement.log) as ranks[3]. Returns the index of the survivor that leads (0 or 2: printed_by).
std::size_t lose_a_rank_and_start_a_replacement(Ranks& ranks, const std::string& dir) {
  const std::vector<std::string> args{"100000", "0"};
  start_and_signal(ranks, dir, 3, 1, SIGKILL, args);
  const std::size_t leader = printed_by(ranks, {0, 2}, "Recovered in place");
  std::vector<std::string> replacement = recovering_run(dir, args);
  replacement.push_back("--join");
  ranks.processes.push_back(testing::spawn(replacement, {}, dir + "/replacement.log"));
  return leader;
}

// A replacement started with --join (as ddp-restart starts one in a step of its own) asks rank 0, is taken in at a
// step boundary, receives the state, and the group is back to its size, up to a stop all four ranks agree on.
TEST_F(RecoverInPlace, AReplacementJoinsIsHealedFromRankZeroAndTheGroupGrowsBack) {
  const std::string dir = run_dir();
  Ranks ranks;
  const std::size_t leader = lose_a_rank_and_start_a_replacement(ranks, dir);
  // Rank 0 takes the replacement in at a step boundary, where every survivor has as many steps: it stays rank 0.
  EXPECT_EQ(printed_by(ranks, {0, 2}, "Grew in place"), leader) << testing::read_text(dir + "/replacement.log");
  ASSERT_TRUE(testing::wait_for_text(dir + "/replacement.log", "Joined the run", ranks[3]));
  const std::string output_path = ranks[leader].output_path;
  ranks.processes.erase(ranks.processes.begin() + 1);  // the killed one
  stop_all(ranks);
  for (const Process& p : ranks.processes) EXPECT_EQ(testing::wait_at_most(p, std::chrono::seconds(60)), 75);
  const std::string output = testing::read_text(output_path);
  EXPECT_TRUE(contains(output, "Grew in place: rank 3 on " + host_name() +
                                   " (cpu) joined, healed from rank 0; 3 ranks went on from step "))
      << output;
  EXPECT_TRUE(contains(output, "| Training snapshot saved at " + dir + "/snapshot-")) << output;
  const std::string joined = testing::read_text(dir + "/replacement.log");
  // The replacement asks the leader by its member id, its rank when the run started.
  EXPECT_TRUE(contains(joined, "Replacement: asked rank " + std::to_string(leader) + " to join the run (request 1)"))
      << joined;
  EXPECT_TRUE(contains(joined, "] Joined the run as rank 3 on " + host_name() + " (cpu), healed from rank 0 at step "))
      << joined;
  EXPECT_TRUE(contains(joined, "[CPU2] Stopped at epoch ")) << joined;
}

// A replacement that dies while it is taken in (after it asked, before it took the state) fails that generation's
// forming: the others meet again without it and go on.
TEST_F(RecoverInPlace, AReplacementKilledWhileItIsTakenInIsLeftBehind) {
  const std::string dir = run_dir();
  Ranks ranks;
  lose_a_rank_and_start_a_replacement(ranks, dir);
  ASSERT_TRUE(testing::wait_for_text(dir + "/replacement.log", "Replacement: asked rank ", ranks[3]));
  kill(ranks[3].pid, SIGKILL);
  const std::size_t leader = printed_by(ranks, {0, 2}, "Recovered in place: rank 3 on ");
  stop_all(ranks);
  EXPECT_EQ(testing::wait_at_most(ranks[0], std::chrono::seconds(60)), 75);
  EXPECT_EQ(testing::wait_at_most(ranks[2], std::chrono::seconds(30)), 75);
  const std::string output = testing::read_text(ranks[leader].output_path);
  EXPECT_TRUE(contains(output, "); 2 ranks went on from step ")) << output;
}

// A replacement that starts after the run has ended (its step was late) is told so at once, not after waiting twice
// the timeout for a rank 0 that is gone (which ends with "did not answer").
TEST_F(RecoverInPlace, AReplacementStartedAfterTheRunEndedIsToldSoAtOnce) {
  const std::string dir = run_dir();
  for (const auto& rank : testing::run_ranks(2, recovering_run(dir, {"2", "0"}), dir)) {
    ASSERT_EQ(rank.status, 0) << rank.output;
  }
  std::vector<std::string> replacement = recovering_run(dir, {"2", "0"});
  replacement.push_back("--join");
  Ranks late;
  late.processes.push_back(testing::spawn(replacement, {}, dir + "/replacement.log"));
  EXPECT_EQ(testing::wait_at_most(late[0], std::chrono::seconds(60)), 1);
  const std::string output = testing::read_text(dir + "/replacement.log");
  EXPECT_TRUE(contains(output, "this replacement could not join the run: it has ended (" + dir + "/.ddp-group-"))
      << output;
}

// Storage that fails is not a lost peer. LD_PRELOAD's io_fault makes fsync of the run's files in `dir` (snapshots,
// the probe of a new rank 0, the group file) fail with `error` while dir/storage-fault exists.
testing::Env storage_fault(const std::string& dir, int error) {
  return {{"LD_PRELOAD", IO_FAULT_LIBRARY},
          {"IO_FAULT_PATH", dir + "/."},
          {"IO_FAULT_CALL", "fsync"},
          {"IO_FAULT_ERRNO", std::to_string(error)},
          {"IO_FAULT_WHILE", dir + "/storage-fault"}};
}

// A soft NFS mount that times out on every snapshot write (ETIMEDOUT, "Connection timed out"): the run ends after
// the third failure in a row, every rank with the same line naming the directory and the error, exit status 1;
// before, the error's "timed out" read as a lost peer and the ranks regrouped at every step, for ever.
TEST_F(RecoverInPlace, SnapshotWritesThatTimeOutEndTheRunOnEveryRankWithoutARegroup) {
  const std::string dir = run_dir();
  Ranks ranks;
  ranks.processes = testing::spawn_ranks(3, recovering_run(dir, {"--snapshot-every-seconds", "0.2", "100000", "0"}),
                                         dir, storage_fault(dir, ETIMEDOUT));
  ASSERT_TRUE(testing::wait_for_text(ranks[0].output_path, "Training snapshot saved at", ranks[0]));
  testing::write_bytes(dir + "/storage-fault", "");
  for (const Process& p : ranks.processes) EXPECT_EQ(testing::wait_at_most(p, std::chrono::seconds(120)), 1);
  for (const Process& p : ranks.processes) {
    const std::string output = testing::read_text(p.output_path);
    EXPECT_TRUE(contains(output, "ddp-train: 3 snapshots in a row could not be written to " + dir + " (last: "))
        << output;
    EXPECT_TRUE(contains(output, "Connection timed out")) << output;
    EXPECT_FALSE(contains(output, "Recovered in place")) << output;
  }
}

// The disk fills up and rank 0 dies: the new rank 0 cannot open the snapshot directory (its probe's fsync fails
// with ENOSPC) and trains on, saying so; once space is freed its next snapshot is written. Before, it ended with
// exit status 2, and so did every next rank 0, until no rank was left.
TEST_F(RecoverInPlace, AFullDiskAtALeaderChangeDoesNotEndTheRun) {
  const std::string dir = run_dir();
  Ranks ranks;
  ranks.processes = testing::spawn_ranks(3, recovering_run(dir, {"--snapshot-every-seconds", "1", "100000", "0"}), dir,
                                         storage_fault(dir, ENOSPC));
  ASSERT_TRUE(testing::wait_for_text(ranks[0].output_path, "] Epoch 3 | Batchsize", ranks[0]));
  testing::write_bytes(dir + "/storage-fault", "");
  kill(ranks[0].pid, SIGKILL);
  const std::size_t leader = printed_by(ranks, {1, 2}, "Recovered in place: rank 0 on ");
  EXPECT_TRUE(testing::wait_for_text(ranks[leader].output_path, "rank 0 cannot write snapshots now (", ranks[leader]))
      << testing::read_text(ranks[leader].output_path);
  const std::string full = testing::read_text(ranks[leader].output_path);
  EXPECT_TRUE(contains(full, "No space left on device")) << full;
  EXPECT_FALSE(contains(full, "Training snapshot saved at")) << full;
  std::filesystem::remove(dir + "/storage-fault");
  EXPECT_TRUE(testing::wait_for_text(ranks[leader].output_path, "Training snapshot saved at " + dir + "/snapshot-",
                                     ranks[leader]))
      << testing::read_text(ranks[leader].output_path);
  ranks.processes.erase(ranks.processes.begin());  // the killed one
  stop_all(ranks);
  for (const Process& p : ranks.processes) EXPECT_EQ(testing::wait_at_most(p, std::chrono::seconds(60)), 75);
}

// With --min-ranks 3, losing one of 3 ranks leaves too few: the rank with the newest state writes a snapshot of it
// and all end; the same command started again resumes from it and ends with the model an uninterrupted run ends
// with, bit for bit.
TEST_F(RecoverInPlace, BelowMinRanksASnapshotIsWrittenAndARestartResumesItBitForBit) {
  const std::string clean = run_dir();
  const std::vector<std::string> args{"--min-ranks", "3", "8", "0"};
  for (const auto& rank : testing::run_ranks(3, recovering_run(clean, args), clean)) {
    ASSERT_EQ(rank.status, 0) << rank.output;
  }
  const std::string dir = run_dir();
  {
    Ranks ranks;
    start_and_signal(ranks, dir, 3, 2, SIGKILL, args);
    EXPECT_EQ(testing::wait_at_most(ranks[0], std::chrono::seconds(60)), 1);
    EXPECT_EQ(testing::wait_at_most(ranks[1], std::chrono::seconds(60)), 1);
    // The survivor with the newest state writes the snapshot (either one, under load); both say why they end.
    const std::string output = testing::read_text(ranks[0].output_path) + testing::read_text(ranks[1].output_path);
    EXPECT_TRUE(contains(output, "ddp-train: rank 2 on " + host_name() + " (cpu) was lost (")) << output;
    EXPECT_TRUE(contains(output,
                         "2 of 3 ranks answer, fewer than --min-ranks 3: training cannot go on in place; "
                         "this rank wrote a snapshot of step "))
        << output;
  }
  // A replacement for the killed rank (ddp-restart starts one for each failed task) is told at once that the run
  // ended, rather than waiting twice the timeout for a rank 0 that is gone.
  {
    std::vector<std::string> replacement = recovering_run(dir, args);
    replacement.push_back("--join");
    Ranks late;
    late.processes.push_back(testing::spawn(replacement, {}, dir + "/replacement.log"));
    EXPECT_EQ(testing::wait_at_most(late[0], std::chrono::seconds(30)), 1);
    const std::string output = testing::read_text(dir + "/replacement.log");
    EXPECT_TRUE(contains(output, "this replacement could not join the run: it has ended (" + dir + "/.ddp-group-"))
        << output;
  }
  const auto resumed = testing::run_ranks(3, recovering_run(dir, args), dir);
  for (const auto& rank : resumed) ASSERT_EQ(rank.status, 0) << rank.output;
  EXPECT_TRUE(contains(resumed[0].output, "Resuming training from snapshot at Epoch ")) << resumed[0].output;
  const auto a = testing::load_dict(clean + "/final.pt");
  const auto b = testing::load_dict(dir + "/final.pt");
  ASSERT_EQ(a.size(), b.size());
  for (const auto& item : a) {
    EXPECT_TRUE(item.value().toTensor().equal(b.at(item.key()).toTensor())) << item.key().toStringRef();
  }
  EXPECT_EQ(last_loss(resumed[0].output), last_loss(testing::read_text(clean + "/rank0.log")));
}

// Under LibTorch 1.13 every rank refuses --recover in-place and a replacement (--join), in one line that names the
// version, the reason and the fix, before any training.
TEST(LibTorch1, RecoverInPlaceIsRefusedWithTheReason) {
#if TORCH_VERSION_MAJOR >= 2
  GTEST_SKIP() << "LibTorch " << TORCH_VERSION_MAJOR << "." << TORCH_VERSION_MINOR << " recovers in place";
#endif
  const std::string dir = testing::make_temp_dir();
  const std::string refusal =
      "--recover in-place needs LibTorch 2.0 or newer, and this ddp-train is built with "
      "LibTorch 1.13, whose store client ends the process when another rank's node dies; use "
      "--recover none (DDP_RECOVER) with ddp-restart, or a ddp-train built with LibTorch 2.x";
  for (const auto& rank : testing::run_ranks(2, recovering_run(dir, {"2", "0"}), dir)) {
    EXPECT_NE(rank.status, 0) << rank.output;
    EXPECT_TRUE(contains(rank.output, refusal)) << rank.output;
    EXPECT_FALSE(contains(rank.output, "Epoch 0 | Loss")) << rank.output;
  }
  std::vector<std::string> replacement = recovering_run(dir, {"2", "0"});
  replacement.push_back("--join");
  const auto joined = testing::run(replacement);
  EXPECT_NE(joined.status, 0) << joined.output;
  EXPECT_TRUE(contains(joined.output, refusal)) << joined.output;
}

}  // namespace
}  // namespace ddp::runtime
