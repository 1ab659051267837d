#include "report/step_logs.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "base/parse.hpp"
#include "base/user.hpp"
#include "core/error.hpp"
#include "test_common.hpp"

namespace ddp {
namespace {

using ddp::testing::error_of;
using testing::TempDir;

using testing::write_file;

TEST(StepLogs, BaseIsDdpLogDirElseTheUsersCache) {
  EXPECT_EQ(log_base(std::nullopt, "/home/ann"), "/home/ann/.cache/slurm-ddp");
  EXPECT_EQ(log_base(std::string("/fsx/ann/logs"), "/home/ann"), "/fsx/ann/logs");
  EXPECT_EQ(log_base(std::string(""), "/home/ann"), "/home/ann/.cache/slurm-ddp");
  EXPECT_FALSE(log_base(std::nullopt, ""));
  try {
    log_base(std::string("logs"), "/home/ann");
    FAIL() << "a relative DDP_LOG_DIR was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("DDP_LOG_DIR='logs' is not an absolute path"), std::string::npos) << e.what();
  }
  EXPECT_EQ(step_log_dir("/fsx/logs/", "12.3"), "/fsx/logs/12.3");
  EXPECT_EQ(error_file_name(7, "node 2/x"), "error-rank7-node_2_x.json");
}

// srun and ddp-why: this process's DDP_LOG_DIR, else the passwd entry's home of the calling user.
TEST(StepLogs, OwnBaseIsThisProcesssDdpLogDirElseItsUsersHome) {
  const auto user = find_user(getuid());
  ASSERT_TRUE(user) << "the test's own uid has no passwd entry";
  EXPECT_FALSE(find_user(static_cast<uid_t>(-2)));  // 4294967294: no entry on any test machine
  const char* saved = std::getenv(kLogDirVariable);
  const std::string restore = saved ? saved : "";
  setenv(kLogDirVariable, "/fsx/logs", 1);
  EXPECT_EQ(own_log_base(), "/fsx/logs");
  unsetenv(kLogDirVariable);
  EXPECT_EQ(own_log_base(), log_base(std::nullopt, user->home));
  if (saved) setenv(kLogDirVariable, restore.c_str(), 1);
}

constexpr auto kDeadline = std::chrono::seconds(10);

unsigned mode_of(const std::string& path) {
  struct stat info = {};
  EXPECT_EQ(lstat(path.c_str(), &info), 0) << path;
  return info.st_mode & 07777;
}

TEST(StepLogs, PrepareMakesTheBaseAndTheStepsDirectoryPrivate) {
  TempDir dir;
  const std::string base = dir.path() + "/logs";
  prepare_step_log_dir(base, "12.3", kDeadline);
  EXPECT_EQ(mode_of(base), 0700u);
  EXPECT_EQ(mode_of(base + "/12.3"), 0700u);
  prepare_step_log_dir(base, "12.3", kDeadline);  // every task of the step does it again
  EXPECT_NE(error_of([] { prepare_step_log_dir("relative", "12.3", kDeadline); }).find("is not an absolute path"),
            std::string::npos);
  EXPECT_FALSE(std::filesystem::exists("relative"));
  std::ofstream(dir.path() + "/file") << "not a directory";
  EXPECT_NE(error_of([&] {
              prepare_step_log_dir(dir.path() + "/file", "12.3", kDeadline);
            }).find("log directory '" + dir.path() + "/file' is not a directory; export DDP_LOG_DIR="),
            std::string::npos);
}

// The attack on a shared DDP_LOG_DIR: another user pre-creates the next job's <job>.<step> in a team directory that
// everyone may write, and keeps a link named like a task's error file there; PyTorch's @record would overwrite the
// link's target as the victim. The victim's task must refuse the directory (and so point PyTorch at no file), and so
// must its srun, which would otherwise print the planted report as the first failure.
TEST(StepLogs, ADirectoryOrLinkAnotherUserPlantedIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to act as two users";
  constexpr uid_t kVictim = 65534, kAttacker = 65533;
  TempDir dir;
  const std::string team = dir.path() + "/team";
  ASSERT_EQ(mkdir(team.c_str(), 0700), 0);
  ASSERT_EQ(chmod(team.c_str(), 01777), 0);
  ASSERT_EQ(chmod(dir.path().c_str(), 0755), 0);
  const std::string planted = team + "/12.0";
  ASSERT_EQ(mkdir(planted.c_str(), 0777), 0);
  ASSERT_EQ(chmod(planted.c_str(), 0777), 0);
  const std::string target = dir.path() + "/victims-file";
  std::ofstream(target) << "the victim's data";
  ASSERT_EQ(chown(target.c_str(), kVictim, kVictim), 0);
  ASSERT_EQ(symlink(target.c_str(), (planted + "/" + error_file_name(0, "node1")).c_str()), 0);
  std::ofstream(planted + "/" + error_file_name(1, "node1")) << R"({"message": "planted \u001b]0;owned\u0007"})";
  for (const std::string& path : {planted, planted + "/" + error_file_name(1, "node1")}) {
    ASSERT_EQ(lchown(path.c_str(), kAttacker, kAttacker), 0);
  }
  // Its own directory for the victim's next job, in the same team directory.
  const std::string own = dir.path() + "/own";
  ASSERT_EQ(mkdir(own.c_str(), 0700), 0);
  ASSERT_EQ(chown(own.c_str(), kVictim, kVictim), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (setresgid(kVictim, kVictim, kVictim) != 0 || setresuid(kVictim, kVictim, kVictim) != 0) _exit(3);
    const std::string task = error_of([&] { prepare_step_log_dir(team, "12.0", kDeadline); });
    const std::string at_start = error_of([&] { start_step_log_dir(team, "12.0"); });
    std::optional<std::string> at_exit;
    const std::string reading = error_of([&] { at_exit = finish_step_log_dir(team, "12.0"); });
    const std::string refusal = "log directory '" + team + "' is owned by uid 0, not by you (uid 65534): its owner " +
                                "could read, replace or delete your error reports; export DDP_LOG_DIR=";
    bool ok = true;
    for (const std::string& message : {task, at_start, reading}) {
      if (message.rfind(refusal, 0) != 0) {
        std::fprintf(stderr, "expected [%s...], got [%s]\n", refusal.c_str(), message.c_str());
        ok = false;
      }
    }
    // A directory of the victim's own with another user's step directory in it: refused by name.
    _exit(ok && !at_exit ? 0 : 1);
  }
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  std::string content;
  std::getline(std::ifstream(target), content);
  EXPECT_EQ(content, "the victim's data");
  // The victim's own base with another user's step directory in it (moved there by root, say): refused too.
  ASSERT_EQ(rename(planted.c_str(), (own + "/12.0").c_str()), 0);
  ASSERT_EQ(lchown((own + "/12.0").c_str(), kAttacker, kAttacker), 0);
  const pid_t second = fork();
  ASSERT_GE(second, 0);
  if (second == 0) {
    if (setresgid(kVictim, kVictim, kVictim) != 0 || setresuid(kVictim, kVictim, kVictim) != 0) _exit(3);
    const std::string message = error_of([&] { prepare_step_log_dir(own, "12.0", kDeadline); });
    _exit(message.rfind("log directory '" + own + "/12.0' is owned by uid 65533", 0) == 0 ? 0 : 1);
  }
  waitpid(second, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

// A requeued job runs <job>.<step> again, and a new cluster's job ids start again at 1: what an earlier attempt left
// in the step's directory is gone before the tasks start, so srun names only this attempt's failure, and a step that
// succeeds leaves nothing. The job's earlier steps keep their reports but not their flight-recorder dumps; other jobs
// keep everything.
TEST(StepLogs, AnEarlierAttemptsFilesAreGoneBeforeTheStepStarts) {
  TempDir dir;
  const std::string base = dir.path();
  for (const char* step : {"12.0", "12.1", "13.0"}) ASSERT_EQ(mkdir((base + "/" + step).c_str(), 0700), 0);
  write_file(base + "/12.0/" + error_file_name(5, "node2"), R"({"message": "ValueError: the earlier attempt's"})",
             1700000000);
  write_file(base + "/12.0/" + nccl_dump_prefix("node2") + "5", std::string(100, 'x'));
  ASSERT_EQ(symlink("/etc/hostname", (base + "/12.0/" + error_file_name(6, "node2")).c_str()), 0);
  write_file(base + "/12.0/notes.txt", "the user's own file");
  write_file(base + "/12.1/" + error_file_name(0, "node1"), R"({"message": "an earlier step"})");
  write_file(base + "/12.1/" + nccl_dump_prefix("node1") + "0", std::string(100, 'x'));
  write_file(base + "/13.0/" + nccl_dump_prefix("node1") + "0", std::string(100, 'x'));

  EXPECT_EQ(start_step_log_dir(base, "12.0"), 4u);
  EXPECT_TRUE(std::filesystem::exists(base + "/12.0/notes.txt"));
  EXPECT_TRUE(std::filesystem::exists(base + "/12.1/" + error_file_name(0, "node1")));
  EXPECT_FALSE(std::filesystem::exists(base + "/12.1/" + nccl_dump_prefix("node1") + "0"));
  EXPECT_TRUE(std::filesystem::exists(base + "/13.0/" + nccl_dump_prefix("node1") + "0"));
  EXPECT_TRUE(std::filesystem::exists("/etc/hostname"));
  std::filesystem::remove(base + "/12.0/notes.txt");
  EXPECT_EQ(finish_step_log_dir(base, "12.0"), std::nullopt);  // the step succeeded: nothing to say
  EXPECT_FALSE(std::filesystem::exists(base + "/12.0"));

  start_step_log_dir(base, "12.0");
  write_file(base + "/12.0/" + error_file_name(1, "node1"), R"({"message": "ValueError: this attempt's"})");
  const auto line = finish_step_log_dir(base, "12.0");
  ASSERT_TRUE(line);
  EXPECT_NE(line->find("step 12.0 failed; first failure: rank 1 on node1, at "), std::string::npos) << *line;
  EXPECT_NE(line->find(": ValueError: this attempt's (ddp-why 12.0 shows the whole report)"), std::string::npos)
      << *line;
}

}  // namespace
}  // namespace ddp
