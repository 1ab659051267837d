#pragma once
// Why a step failed: the reports its tasks left in the step's log directory (step_logs.hpp) and srun's lines about
// tasks that exited badly, joined into the first failure in time, as torchrun's "Root Cause (first observed
// failure)". Read by srun at exit (one line), ddp-why and ddp-restart (the whole story).
//
// Error files are torchrun's format (torch/distributed/elastic/multiprocessing/errors, what @record writes):
//   {"message": {"message": "RuntimeError: boom",
//                "extraInfo": {"py_callstack": "Traceback ...", "timestamp": "1700000000"},
//                "errorCode": 1}}                          errorCode: torchrun's exit-code field, optional
//   {"message": "text", "timestamp": 1700000000}           the older flat form
// ddp-train adds "run_id", "rank" and "hostname" to extraInfo. A file that is not such JSON, larger than the limit,
// not a regular file, or from another step (another run_id, or older than the step) is ignored with a warning.
// The writer is here too (write_error_report, which ddp-train calls), so that both sides of the format are one file.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/env.hpp"

namespace ddp {

struct ReportLimits {
  std::size_t max_file_bytes = 1 << 20;    // torchrun's reports are a few KiB; a traceback of 1 MiB is not one
  std::size_t max_entries = 1 << 16;       // directory entries examined, at most
  std::size_t max_total_bytes = 16 << 20;  // all reports read together, oldest first: thousands of real ones
};

struct ErrorReport {
  uint32_t rank = 0;
  std::string host;
  std::string file;
  double time = 0;               // when the report was written: the file's modification time, seconds since 1970
  std::string message;           // "RuntimeError: boom"
  std::string traceback;         // py_callstack; empty when the writer had none
  std::optional<int> exit_code;  // errorCode, when the writer knew it
  std::string run_id;            // extraInfo.run_id (ddp-train's); empty from @record
  bool consequence = false;      // the message says a peer went away: a failure caused by another one
};

struct FlightRecorderDump {
  uint32_t rank = 0;
  std::string host;
  std::string file;
  uint64_t bytes = 0;
};

struct StepReports {
  std::string dir;
  std::vector<ErrorReport> errors;  // oldest first
  std::vector<FlightRecorderDump> dumps;
  std::vector<std::string> warnings;  // one line per file ignored
  std::size_t bytes_read = 0;         // of reports, against ReportLimits::max_total_bytes
};

// Which reports belong to the step: a run id other than `run_id` (when not empty) or a modification time before
// `not_before` (seconds since 1970; 0: any) marks a report of another step.
struct StepIdentity {
  std::string run_id;
  double not_before = 0;
};

// A time of this host's clock (`local_now` tells it) as the clock that stamps files in `dir_fd`: a file server's,
// or the writing node's. Measured by a file created and removed there; `local` unchanged when it cannot be (the
// directory is not writable). Reports are stamped by that clock, the start of a step is known by this host's:
// without it, a few seconds of skew drop the first reports of a step as "before the step started".
double on_file_clock(int dir_fd, double local, const std::function<double()>& local_now);
double wall_clock_seconds();

// Reads the reports in the directory `dir_fd` (`dir` names it in warnings): each a regular file opened without
// following a link or blocking, the oldest first until `limits` are reached. Throws ddp::Error when the directory
// cannot be listed.
StepReports read_step_reports(int dir_fd, const std::string& dir, const ReportLimits& limits,
                              const StepIdentity& identity = {});

// The same for a path: a missing directory gives no reports; one that cannot be read throws ddp::Error.
StepReports read_step_reports(const std::string& dir, const ReportLimits& limits, const StepIdentity& identity = {});

// What a name in a step's directory is: "error-rank<R>-<host>.json", "nccl-<host>-rank<R>" (step_logs.hpp), or
// neither.
enum class ReportKind { None, Error, Dump };
ReportKind report_kind(std::string_view name);

// Parses one report's text; nullopt with `why` set when it is not one.
std::optional<ErrorReport> parse_error_report(const std::string& text, std::string* why);

// The report a program writes when it ends with an error, as @record does for a Python program:
//   {"message": {"message": "<error>", "errorCode": <exit status>,
//                "extraInfo": {"timestamp": "<seconds since 1970>", "run_id": "<TORCHELASTIC_RUN_ID>",
//                              "rank": <RANK>, "hostname": "<host>", "program": "ddp-train"}}}
// errorCode is the field torchrun itself fills with a worker's exit code; the extraInfo keys after timestamp are
// ours (torchrun reads timestamp and py_callstack and ignores the rest). `time`: seconds since 1970. Key material in
// the message (core/redact.hpp) is not written.
std::string error_report_json(const std::string& message, int exit_status, const EnvLookup& env, double time);

// Writes that report to TORCHELASTIC_ERROR_FILE (set per task by srun --ddp and by torchrun) when it is set, through
// a temporary file and a rename, so that a reader never sees half of it; returns false, with `why` set, when it
// cannot. Without the variable, does nothing.
bool write_error_report(const std::string& message, int exit_status, const EnvLookup& env, std::string* why);

// srun's lines about tasks that ended badly, in the order srun printed them:
//   srun: error: node2: task 3: Exited with exit code 1
//   srun: error: node1: tasks 0-1: Killed
struct TaskExit {
  std::string node;
  uint32_t first_task = 0;
  uint32_t last_task = 0;
  std::string status;            // "Exited with exit code 1", "Killed", "Segmentation fault (core dumped)"
  std::optional<int> exit_code;  // from "exit code N"
};
std::vector<TaskExit> parse_srun_exits(const std::string& srun_stderr);

// The first failure: the first task srun saw exit badly (with its report, when it left one); without srun's lines,
// the oldest report that is not a consequence of another failure, else the oldest report.
struct FirstFailure {
  uint32_t rank = 0;
  std::string host;
  std::optional<ErrorReport> report;
  std::optional<TaskExit> exit;
};
std::optional<FirstFailure> first_failure(const StepReports& reports, const std::vector<TaskExit>& exits);

// "rank 1 on node2, exit code 1, at 2026-11-23 22:40:01: RuntimeError: boom", printable (terminal_text).
std::string one_line(const FirstFailure& failure);

// The last `count` lines of task `rank` in srun's output: lines srun labelled "<rank>: " (srun --label) when there
// are any; nullopt when none is labelled.
std::optional<std::vector<std::string>> task_output_tail(const std::string& srun_output, uint32_t rank,
                                                         std::size_t count);

// "2026-11-23 22:40:01.123" in local time.
std::string format_time(double seconds_since_epoch);

}  // namespace ddp
