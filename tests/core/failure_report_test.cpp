#include "failure_report.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "error.hpp"
#include "step_logs.hpp"
#include "test_common.hpp"
#include "user.hpp"

namespace ddp {
namespace {

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

TEST(StepLogs, PrepareCreatesTheDirectoryAndRemovesOnlyThisTasksStaleReports) {
  TempDir dir;
  const std::string step = dir.path() + "/logs/12.3";
  prepare_step_log_dir(step, 1, "node1");
  struct stat info = {};
  ASSERT_EQ(stat(step.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0700u);
  std::ofstream(step + "/" + error_file_name(1, "node1")) << "stale";
  std::ofstream(step + "/" + nccl_dump_prefix("node1") + "1") << "stale";
  std::ofstream(step + "/" + error_file_name(2, "node1")) << "another task's";
  prepare_step_log_dir(step, 1, "node1");
  EXPECT_FALSE(std::filesystem::exists(step + "/" + error_file_name(1, "node1")));
  EXPECT_FALSE(std::filesystem::exists(step + "/" + nccl_dump_prefix("node1") + "1"));
  EXPECT_TRUE(std::filesystem::exists(step + "/" + error_file_name(2, "node1")));
  EXPECT_TRUE(remove_step_log_dir_if_empty(step));
  std::filesystem::remove(step + "/" + error_file_name(2, "node1"));
  EXPECT_FALSE(remove_step_log_dir_if_empty(step));
  EXPECT_FALSE(std::filesystem::exists(step));
  EXPECT_THROW(prepare_step_log_dir("relative/12.3", 0, "node1"), Error);
  std::ofstream(dir.path() + "/file") << "not a directory";
  try {
    prepare_step_log_dir(dir.path() + "/file", 0, "node1");
    FAIL() << "a file was taken for the log directory";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("file' is not a directory; export DDP_LOG_DIR="), std::string::npos)
        << e.what();
  }
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
