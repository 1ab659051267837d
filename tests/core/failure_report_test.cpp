#include "failure_report.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sys/wait.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>

#include "error.hpp"
#include "parse.hpp"
#include "step_logs.hpp"
#include "test_common.hpp"
#include "user.hpp"

namespace ddp {
namespace {

using ddp::testing::error_of;

// What PyTorch's @record wrote for `raise RuntimeError("boom")` (python3-torch 1.13, Debian 12), byte for byte.
const char* const kRecordOutput =
    R"json({"message": {"message": "RuntimeError: boom", "extraInfo": {"py_callstack": "Traceback (most recent call )json"
    R"json(last):\n  File \"/tmp/t.py\", line 4, in main\n    raise RuntimeError(\"boom\")\nRuntimeError: boom\n", )json"
    R"json("timestamp": "1795473684"}}})json";

using testing::TempDir;

// A file with `text`, and `mtime` (seconds since 1970) as its modification time when given.
void write_file(const std::string& path, const std::string& text, double mtime = 0) {
  std::ofstream(path, std::ios::binary) << text;
  if (mtime > 0) {
    const timespec times[2] = {{static_cast<time_t>(mtime), 0}, {static_cast<time_t>(mtime), 0}};
    utimensat(AT_FDCWD, path.c_str(), times, 0);
  }
}

std::string ddp_train_report(const std::string& run_id, const std::string& message, int code) {
  return R"json({"message": {"message": ")json" + message +
         R"json(", "extraInfo": {"timestamp": "1795473684", "run_id": ")json" + run_id +
         R"json(", "rank": 2, "hostname": "node2"}, "errorCode": )json" + std::to_string(code) + "}}";
}

TEST(FailureReport, ReadsWhatPytorchsRecordWrites) {
  std::string why;
  const auto report = parse_error_report(kRecordOutput, &why);
  ASSERT_TRUE(report) << why;
  EXPECT_EQ(report->message, "RuntimeError: boom");
  EXPECT_NE(report->traceback.find("raise RuntimeError(\"boom\")"), std::string::npos);
  EXPECT_FALSE(report->exit_code);
  EXPECT_FALSE(report->consequence);
}

TEST(FailureReport, ReadsTheFlatFormAndTorchrunsErrorCode) {
  std::string why;
  const auto flat = parse_error_report(R"json({"message": "Signal 9 (SIGKILL)", "timestamp": 1795473684})json", &why);
  ASSERT_TRUE(flat) << why;
  EXPECT_EQ(flat->message, "Signal 9 (SIGKILL)");
  const auto coded = parse_error_report(ddp_train_report("7.1", "ddp-train: boom", 1), &why);
  ASSERT_TRUE(coded) << why;
  EXPECT_EQ(coded->exit_code, 1);
  EXPECT_EQ(coded->run_id, "7.1");
  // Found by tests/fuzz/failure_report_fuzz: a negative errorCode became "exit code -1" (and one below INT_MIN
  // wrapped around). An exit status is 0-255; anything else is no exit code.
  for (const char* code : {"-1", "256", "-9223372036854775808"}) {
    const std::string text = R"json({"message": {"message": "boom", "errorCode": )json" + std::string(code) + "}}";
    const auto odd = parse_error_report(text, &why);
    ASSERT_TRUE(odd) << why;
    EXPECT_FALSE(odd->exit_code) << code << " became " << *odd->exit_code;
  }
}

TEST(FailureReport, RefusesWhatIsNotAnErrorFile) {
  std::string why;
  EXPECT_FALSE(parse_error_report("Traceback (most recent call last):", &why));
  EXPECT_EQ(why, "is not JSON");
  EXPECT_FALSE(parse_error_report(R"json({"msg": "x"})json", &why));
  EXPECT_NE(why.find("no \"message\""), std::string::npos);
  EXPECT_FALSE(parse_error_report(R"json({"message": 42})json", &why));
  EXPECT_FALSE(parse_error_report(R"json([1, 2])json", &why));
  EXPECT_FALSE(parse_error_report(R"json({"message": {"extraInfo": {}}})json", &why));
  EXPECT_EQ(why, "has an empty message");
  // Deep nesting is only a parse error, not a crash.
  EXPECT_FALSE(parse_error_report(std::string(100000, '[') + std::string(100000, ']'), &why));
}

TEST(FailureReport, ReadsAStepDirectoryOldestFirstWithRankAndHostFromTheNames) {
  TempDir dir;
  write_file(dir / error_file_name(3, "node2"), R"json({"message": "RuntimeError: Connection closed by peer"})json",
             1795473690);
  write_file(dir / error_file_name(1, "node1"), kRecordOutput, 1795473680);
  write_file(dir / nccl_dump_prefix("node2") + "3", std::string(300, 'x'));
  write_file(dir / "notes.txt", "not ours");
  const StepReports reports = read_step_reports(dir.path(), {});
  ASSERT_EQ(reports.errors.size(), 2u);
  EXPECT_EQ(reports.errors[0].rank, 1u);
  EXPECT_EQ(reports.errors[0].host, "node1");
  EXPECT_EQ(reports.errors[1].rank, 3u);
  EXPECT_TRUE(reports.errors[1].consequence);
  ASSERT_EQ(reports.dumps.size(), 1u);
  EXPECT_EQ(reports.dumps[0].rank, 3u);
  EXPECT_EQ(reports.dumps[0].bytes, 300u);
  EXPECT_TRUE(reports.warnings.empty());
}

TEST(FailureReport, IgnoresBadFilesWithAWarningEach) {
  TempDir dir;
  write_file(dir / error_file_name(0, "node1"), "Segmentation fault");
  write_file(dir / error_file_name(1, "node1"), std::string(2 << 20, ' '));
  write_file(dir / error_file_name(2, "node2"), ddp_train_report("9.0", "from another step", 1));
  write_file(dir / error_file_name(3, "node2"), kRecordOutput, 1000);
  write_file(dir / error_file_name(4, "node3"), ddp_train_report("12.4", "ddp-train: the real one", 1));
  mkdir((dir.path() + "/" + error_file_name(5, "node3")).c_str(), 0700);
  const StepReports reports = read_step_reports(dir.path(), {}, StepIdentity{"12.4", 1700000000});
  ASSERT_EQ(reports.errors.size(), 1u);
  EXPECT_EQ(reports.errors[0].rank, 4u);
  ASSERT_EQ(reports.warnings.size(), 5u);
  std::string all;
  for (const auto& warning : reports.warnings) all += warning + "\n";
  EXPECT_NE(all.find("is not JSON; ignored"), std::string::npos) << all;
  EXPECT_NE(all.find("more than a report can be"), std::string::npos) << all;
  EXPECT_NE(all.find("is from step '9.0', not 12.4"), std::string::npos) << all;
  EXPECT_NE(all.find("before the step started"), std::string::npos) << all;
  EXPECT_NE(all.find("is not a regular file"), std::string::npos) << all;
}

// ddp-why and ddp-restart know when a step started by their own host's clock; its reports carry the times of the
// clock that stamps files there (a file server's, or the writing node's). Here this host's clock runs 30 s ahead of
// the directory's: a report written 2 s after the step started looked 28 s older than the step and was dropped as an
// earlier step's. On the directory's clock it is the step's.
TEST(FailureReport, ASkewedClockDoesNotDropAStepsFirstReports) {
  TempDir dir;
  const double skew = 30;
  const auto ahead = [&] { return wall_clock_seconds() + skew; };
  const double step_start_here = ahead() - 1;  // the step began a second ago, by this host's clock
  write_file(dir / error_file_name(0, "node1"), R"({"message": "ValueError: early"})");
  const int fd = open(dir.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  const double on_files = on_file_clock(fd, step_start_here, ahead);
  EXPECT_NEAR(on_files, step_start_here - skew, 0.5);
  EXPECT_EQ(read_step_reports(fd, dir.path(), {}, StepIdentity{"12.0", on_files}).errors.size(), 1u);
  std::vector<std::string> left;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) left.push_back(entry.path().filename());
  EXPECT_EQ(left, std::vector<std::string>{error_file_name(0, "node1")});  // the clock's probe is gone
  close(fd);
}

TEST(FailureReport, MissingDirectoryHasNoReportsAndUnreadableOneIsAnError) {
  EXPECT_TRUE(read_step_reports("/nonexistent/ddp/12.0", {}).errors.empty());
  TempDir dir;
  write_file(dir / "12.0", "a file where the step's directory should be");
  try {
    read_step_reports(dir.path() + "/12.0", {});
    FAIL() << "a file was read as a directory";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("12.0' (Not a directory)"), std::string::npos) << e.what();
  }
}

// srun reads the reports of a step at its exit: 65,536 entries of up to 1 MiB each were up to 64 GiB. In all it
// reads a bounded amount, the oldest reports first, so that the first failure is among what it read.
TEST(FailureReport, ReadsABoundedAmountOldestFirst) {
  TempDir dir;
  const std::string filler(1000 * 1000, ' ');
  for (uint32_t rank = 0; rank < 24; ++rank) {
    write_file(dir / error_file_name(rank, "node1"),
               R"({"message": "RuntimeError: rank )" + std::to_string(rank) + "\"}" + filler, 1700000000 + rank);
  }
  const StepReports reports = read_step_reports(dir.path(), {});
  ASSERT_EQ(reports.errors.size(), 16u);
  EXPECT_EQ(reports.errors.front().message, "RuntimeError: rank 0");
  EXPECT_EQ(reports.errors.back().message, "RuntimeError: rank 15");
  ASSERT_EQ(reports.warnings.size(), 1u);
  EXPECT_NE(reports.warnings[0].find("8 later reports not read"), std::string::npos) << reports.warnings[0];
}

// A report is the task's own text, and srun and ddp-why print it on the user's terminal: an escape sequence in it
// (a window title, a cleared screen, a forged line) must never reach the terminal raw.
TEST(FailureReport, OneLineNeverCarriesTerminalControls) {
  StepReports reports;
  ErrorReport hostile;
  hostile.rank = 1;
  hostile.host = "node1";
  hostile.message =
      "boom \x1b]0;owned\x07\x1b[2J\r\x9b"
      "1m ok: \xc3\xa9t\xc3\xa9 \xe2\x80\xa6";
  reports.errors = {hostile};
  const std::string line = one_line(*first_failure(reports, {}));
  EXPECT_EQ(line.find_first_of("\x1b\x07\r\n\x9b"), std::string::npos) << line;
  EXPECT_NE(line.find(": boom ?]0;owned??[2J??1m ok: \xc3\xa9t\xc3\xa9 \xe2\x80\xa6"), std::string::npos) << line;
  EXPECT_EQ(terminal_text("\xc2\x9b"
                          "1m\tx\xed\xa0\x80\xc0\xaf",
                          100),
            "??1m x?????");                              // C1, tab, surrogate, overlong
  EXPECT_EQ(terminal_text("abc\xc3\xa9", 4), "abc...");  // never half a character
}

TEST(FailureReport, ParsesSrunsLinesAboutTasksThatEndedBadly) {
  const auto exits = parse_srun_exits(
      "[CPU1] Epoch 0 | Batchsize: 32\n"
      "srun: error: node2: task 3: Exited with exit code 7\n"
      "srun: error: node1: tasks 0-1: Killed\n"
      "srun: error: Timed out waiting for job step to complete\n"
      "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.\n"
      "srun: error: node3: task 4: Segmentation fault (core dumped)\n");
  ASSERT_EQ(exits.size(), 3u);
  EXPECT_EQ(exits[0].node, "node2");
  EXPECT_EQ(exits[0].first_task, 3u);
  EXPECT_EQ(exits[0].exit_code, 7);
  EXPECT_EQ(exits[1].first_task, 0u);
  EXPECT_EQ(exits[1].last_task, 1u);
  EXPECT_EQ(exits[1].status, "Killed");
  EXPECT_FALSE(exits[1].exit_code);
  EXPECT_EQ(exits[2].status, "Segmentation fault (core dumped)");
  EXPECT_TRUE(parse_srun_exits("srun: error: " + std::string(1 << 20, 'x') + "\n").empty());
}

ErrorReport report(uint32_t rank, double time, const std::string& message) {
  ErrorReport r;
  r.rank = rank;
  r.host = "node" + std::to_string(rank);
  r.time = time;
  r.message = message;
  r.consequence = message.find("closed by peer") != std::string::npos;
  return r;
}

TEST(FailureReport, FirstFailureIsSrunsFirstBadExitWithItsReport) {
  StepReports reports;
  reports.errors = {report(0, 10, "RuntimeError: Connection closed by peer"), report(3, 11, "ValueError: bad batch")};
  const auto exits = parse_srun_exits(
      "srun: error: node3: task 3: Exited with exit code 1\n"
      "srun: error: node0: task 0: Exited with exit code 1\n");
  const auto first = first_failure(reports, exits);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->rank, 3u);
  ASSERT_TRUE(first->report);
  EXPECT_EQ(first->report->message, "ValueError: bad batch");
  EXPECT_NE(one_line(*first).find("rank 3 on node3, Exited with exit code 1, at "), std::string::npos);
}

TEST(FailureReport, AKilledTaskWithoutReportIsTheCauseOfItsPeersReports) {
  StepReports reports;
  reports.errors = {report(0, 10, "RuntimeError: Connection closed by peer")};
  const auto first = first_failure(reports, parse_srun_exits("srun: error: node2: task 2: Killed\n"));
  ASSERT_TRUE(first);
  EXPECT_EQ(first->rank, 2u);
  EXPECT_FALSE(first->report);
  EXPECT_EQ(one_line(*first),
            "rank 2 on node2, Killed (no error report: it was killed, crashed, or its program does not write one)");
}

TEST(FailureReport, WithoutSrunsLinesTheOldestReportThatIsNoConsequence) {
  StepReports reports;
  reports.errors = {report(0, 10, "RuntimeError: Connection closed by peer"), report(3, 11, "ValueError: bad")};
  EXPECT_EQ(first_failure(reports, {})->rank, 3u);
  reports.errors.pop_back();
  EXPECT_EQ(first_failure(reports, {})->rank, 0u);
  EXPECT_FALSE(first_failure(StepReports{}, {}));
}

TEST(FailureReport, TaskOutputTailUsesSrunsLabels) {
  const std::string labelled = "0: starting\n  1: loading\n 1: Traceback\n0: waiting\n1: KeyError: 'x'\n";
  const auto tail = task_output_tail(labelled, 1, 2);
  ASSERT_TRUE(tail);
  EXPECT_EQ(*tail, (std::vector<std::string>{"Traceback", "KeyError: 'x'"}));
  EXPECT_FALSE(task_output_tail("starting\nTraceback\n", 1, 2));
}

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

TEST(StepLogs, TaskVariablesKeepTheUsersWatchdogSettings) {
  TaskEnv env([](const std::string& name) -> std::optional<std::string> {
    if (name == "TORCH_NCCL_TRACE_BUFFER_SIZE") return "64";
    if (name == "TORCHELASTIC_ERROR_FILE") return "/stale/outer/launcher.json";
    return std::nullopt;
  });
  add_failure_reporting(env, std::string("/logs/12.3"), 5, "node3");
  EXPECT_EQ(env.value("TORCHELASTIC_ERROR_FILE"), "/logs/12.3/error-rank5-node3.json");
  EXPECT_EQ(env.value("TORCH_NCCL_ASYNC_ERROR_HANDLING"), "3");
  EXPECT_EQ(env.value("TORCH_NCCL_DUMP_ON_TIMEOUT"), "1");
  EXPECT_EQ(env.value("TORCH_NCCL_TRACE_BUFFER_SIZE"), "64");
  EXPECT_EQ(env.value("TORCH_NCCL_DEBUG_INFO_TEMP_FILE"), "/logs/12.3/nccl-node3-rank");

  TaskEnv without_dir([](const std::string&) { return std::nullopt; });
  add_failure_reporting(without_dir, std::nullopt, 5, "node3");
  EXPECT_FALSE(without_dir.value("TORCHELASTIC_ERROR_FILE"));
  EXPECT_FALSE(without_dir.value("TORCH_NCCL_DEBUG_INFO_TEMP_FILE"));
  EXPECT_EQ(without_dir.value("TORCH_NCCL_ASYNC_ERROR_HANDLING"), "3");
}

}  // namespace
}  // namespace ddp
