#include "report/failure_report.hpp"

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
#include <iterator>
#include <map>

#include "base/parse.hpp"
#include "base/user.hpp"
#include "core/env.hpp"
#include "core/error.hpp"
#include "core/netif.hpp"
#include "report/step_logs.hpp"
#include "test_common.hpp"

namespace ddp {
namespace {

// What PyTorch's @record wrote for `raise RuntimeError("boom")` (python3-torch 1.13, Debian 12), byte for byte.
const char* const kRecordOutput =
    R"json({"message": {"message": "RuntimeError: boom", "extraInfo": {"py_callstack": "Traceback (most recent call )json"
    R"json(last):\n  File \"/tmp/t.py\", line 4, in main\n    raise RuntimeError(\"boom\")\nRuntimeError: boom\n", )json"
    R"json("timestamp": "1795473684"}}})json";

using testing::TempDir;

using testing::write_file;

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

// An environment of these variables only.
EnvLookup env_of(const std::map<std::string, std::string>& variables) {
  return [variables](const std::string& name) -> std::optional<std::string> {
    const auto found = variables.find(name);
    if (found == variables.end()) return std::nullopt;
    return found->second;
  };
}

TEST(FailureReport, WhatDdpTrainWritesTheReaderReadsBack) {
  const auto env = env_of({{"RANK", "3"}, {"TORCHELASTIC_RUN_ID", "41.0"}});
  const std::string text = error_report_json("RuntimeError: \"boom\"\n  at step 7", 5, env, 1795473684.7);
  std::string why;
  const auto report = parse_error_report(text, &why);
  ASSERT_TRUE(report) << why;
  EXPECT_EQ(report->message, "RuntimeError: \"boom\"\n  at step 7");
  EXPECT_EQ(report->exit_code, 5);
  EXPECT_EQ(report->run_id, "41.0");
  EXPECT_NE(text.find("\"rank\": 3,"), std::string::npos) << text;
  EXPECT_NE(text.find("\"timestamp\": \"1795473684\""), std::string::npos) << text;
  EXPECT_NE(text.find("\"hostname\": \"" + host_name() + "\""), std::string::npos) << text;
}

TEST(FailureReport, KeyNamesInTheMessageAreNotWritten) {
  const std::string prefix = "9d4e1e23bd5b727046a9e3b4b7db57bd8d6ee684";
  const std::string text = error_report_json(
      "RuntimeError: Wait timeout for key(s): [\"" + prefix + "/recovery//g2/gloo/rank_4\"]", 1, env_of({}), 0);
  EXPECT_EQ(text.find(prefix), std::string::npos) << text;
  std::string why;
  const auto report = parse_error_report(text, &why);
  ASSERT_TRUE(report) << why;
  EXPECT_EQ(report->message, "RuntimeError: Wait timeout for key(s): [\"<job-key-derived>/recovery//g2/gloo/rank_4\"]");
}

TEST(FailureReport, ARankThatIsNoNumberIsWrittenAsZero) {
  for (const char* rank : {"abc", "", "-1", "99999999999"}) {
    const std::string text = error_report_json("boom", 1, env_of({{"RANK", rank}}), 0);
    EXPECT_NE(text.find("\"rank\": 0,"), std::string::npos) << "RANK=" << rank << ": " << text;
  }
}

TEST(FailureReport, WritesTheErrorFileWholeOrNotAtAll) {
  TempDir dir;
  const std::string path = dir / "error.json";
  std::string why;
  ASSERT_TRUE(write_error_report("ValueError: x", 2, env_of({{"TORCHELASTIC_ERROR_FILE", path}}), &why)) << why;
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto report = parse_error_report(text, &why);
  ASSERT_TRUE(report) << why;
  EXPECT_EQ(report->message, "ValueError: x");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 1) << "a temporary file was left";

  // Without the variable nothing is written; where the file cannot be made, the reason names it.
  EXPECT_TRUE(write_error_report("boom", 1, env_of({}), &why));
  EXPECT_FALSE(write_error_report("boom", 1, env_of({{"TORCHELASTIC_ERROR_FILE", dir / "missing/error.json"}}), &why));
  EXPECT_NE(why.find(dir / "missing/error.json"), std::string::npos) << why;
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 1);
}

}  // namespace
}  // namespace ddp
