// ddp-why: why did a --ddp step fail? The first failure in time, as torchrun's "Root Cause (first observed
// failure)": rank, node, exit status, the exception and its traceback, from the reports the step's tasks left
// (src/report/step_logs.hpp) and srun's lines about tasks that exited badly. Exit status: 0 a failure was shown, 1 none
// found, 2 bad usage or reports that cannot be read.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dirent.h>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "base/command_line.hpp"
#include "base/parse.hpp"
#include "base/unique_fd.hpp"
#include "core/error.hpp"
#include "report/failure_report.hpp"
#include "report/step_logs.hpp"

namespace {

constexpr const char* kUsageIntro = R"(usage: ddp-why [options] JOBID[.STEP]

Names the first failure of a --ddp step: rank, node, exit status, the exception and its traceback, from the
reports its tasks left (TORCHELASTIC_ERROR_FILE, written by PyTorch's @record and by ddp-train) and from srun's
lines about tasks that exited badly; lists PyTorch's NCCL flight-recorder dumps. For a task without a report,
the last lines of its own output when srun labelled each line with its task (srun --label), else the last lines
of the step's output before the failure, whatever task wrote them. JOBID alone: the job's latest step that left
reports.
options:
)";
constexpr const char* kUsageEnd =
    "exit status: 0 a failure was shown, 1 no failure found, 2 bad usage or unreadable reports\n";

constexpr std::size_t kMaxStderrBytes = 4 << 20;
constexpr std::size_t kMaxLine = 4096;            // bytes of one line of a report or of the tasks' output, as printed
constexpr std::size_t kMaxBaseEntries = 1 << 20;  // entries of the log base examined for a job's steps

struct Args {
  std::string log_dir;
  std::string stderr_file;
  double since = 0;
  bool since_given = false;
  std::size_t lines = 20;
  std::string job;
  std::string step;  // empty: the latest step that left reports
  bool help = false;
};

using Value = const std::string&;

const ddp::cli::Table<Args>& option_table() {
  static const ddp::cli::Table<Args> table = {
      {"--log-dir", "DIR", "where the steps' reports are (default: DDP_LOG_DIR, else ~/.cache/slurm-ddp)",
       [](Args& a, Value v) { a.log_dir = v; }},
      {"--stderr", "FILE", "srun's standard error of the step (default: the job's StdErr file, from scontrol)",
       [](Args& a, Value v) { a.stderr_file = v; }},
      {"--since", "SECONDS", "ignore reports written before this time (seconds since 1970), e.g. a restart's start",
       [](Args& a, Value v) {
         a.since = static_cast<double>(ddp::cli::whole<uint64_t>(v, 0, 1ULL << 40));
         a.since_given = true;
       },
       nullptr, "$(date +%s)"},
      {"--lines", "N", "lines of output shown for a task without a report",
       [](Args& a, Value v) { a.lines = ddp::cli::whole<std::size_t>(v, 1, 100000); },
       [](const Args& a) { return std::to_string(a.lines); }},
  };
  return table;
}

std::string usage() { return kUsageIntro + ddp::cli::options_text(option_table(), Args{}) + kUsageEnd; }

Args parse_args(int argc, char** argv) {
  Args args;
  const auto found = ddp::cli::parse(option_table(), args, std::vector<std::string>(argv + 1, argv + argc), "ddp-why");
  args.help = found.help;
  if (found.help) return args;
  const std::vector<std::string>& positionals = found.positionals;
  if (positionals.size() != 1) throw ddp::Error("expected one JOBID or JOBID.STEP; run ddp-why --help");
  const std::string& id = positionals[0];
  const std::size_t dot = id.find('.');
  args.job = std::to_string(ddp::require_uint(id.substr(0, dot), 1, UINT32_MAX, "job id"));
  if (dot != std::string::npos)
    args.step = std::to_string(ddp::require_uint(id.substr(dot + 1), 0, UINT32_MAX, "step id"));
  return args;
}

std::string log_base(const Args& args) {
  if (!args.log_dir.empty()) return args.log_dir;
  const auto base = ddp::own_log_base();
  if (!base) throw ddp::Error("no home directory and no DDP_LOG_DIR: give --log-dir DIR");
  return *base;
}

// What Slurm still knows of the job (scontrol shows it for MinJobAge after its end): its stderr file, start, user.
struct JobInfo {
  std::string stderr_file;
  double start = 0;
  std::string user_id;  // "name(uid)"
};

std::string field(const std::string& line, const std::string& key) {
  const std::size_t at = line.find(" " + key + "=");
  if (at == std::string::npos) return "";
  const std::size_t begin = at + key.size() + 2;
  return line.substr(begin, line.find(' ', begin) - begin);
}

std::optional<JobInfo> scontrol_job(const std::string& job) {
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) return std::nullopt;
  const pid_t child = fork();
  if (child == 0) {
    dup2(pipe_fds[1], 1);
    const int null = open("/dev/null", O_WRONLY);
    if (null >= 0) dup2(null, 2);
    execlp("scontrol", "scontrol", "show", "job", "-o", job.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(pipe_fds[1]);
  std::string text;
  char chunk[4096];
  ssize_t n = 0;
  while (child > 0 && (n = read(pipe_fds[0], chunk, sizeof chunk)) > 0 && text.size() < (1 << 20))
    text.append(chunk, n);
  close(pipe_fds[0]);
  int status = 0;
  if (child < 0 || waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return std::nullopt;
  }
  JobInfo info;
  const std::string line = " " + text.substr(0, text.find('\n'));
  info.stderr_file = field(line, "StdErr");
  info.user_id = field(line, "UserId");
  struct tm start = {};
  const std::string start_text = field(line, "StartTime");
  if (strptime(start_text.c_str(), "%Y-%m-%dT%H:%M:%S", &start) != nullptr) {
    start.tm_isdst = -1;
    info.start = static_cast<double>(mktime(&start));
  }
  return info;
}

// The last kMaxStderrBytes of srun's standard error: a regular file (the job's StdErr may name a FIFO or a device,
// and another job's file is opened without blocking), read by position.
std::string read_tail(const std::string& path) {
  const ddp::UniqueFd fd(open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  if (!fd) throw ddp::Error("cannot read --stderr " + ddp::quote(path) + " (" + std::strerror(errno) + ")");
  struct stat info = {};
  if (fstat(fd.get(), &info) != 0 || !S_ISREG(info.st_mode)) {
    throw ddp::Error("--stderr " + ddp::quote(path) + " is not a regular file; give srun's standard error as a file");
  }
  const off_t start = std::max<off_t>(0, info.st_size - static_cast<off_t>(kMaxStderrBytes));
  std::string text(static_cast<std::size_t>(info.st_size - start), '\0');
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = pread(fd.get(), text.data() + done, text.size() - done, start + static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<std::size_t>(n);
  }
  text.resize(done);
  if (start > 0) text.erase(0, text.find('\n') + 1);
  return text;
}

// The job's step directories, newest step id first.
std::vector<std::string> step_ids(int base_fd, const std::string& base, const std::string& job) {
  std::vector<std::pair<uint64_t, std::string>> steps;
  const int listing_fd = fcntl(base_fd, F_DUPFD_CLOEXEC, 0);
  DIR* listing = listing_fd >= 0 ? fdopendir(listing_fd) : nullptr;
  if (listing == nullptr) {
    if (listing_fd >= 0) close(listing_fd);
    throw ddp::Error("cannot read " + ddp::quote(base) + " (" + std::strerror(errno) + ")");
  }
  const std::string prefix = job + ".";
  for (std::size_t examined = 0; examined < kMaxBaseEntries;) {
    const dirent* entry = readdir(listing);
    if (entry == nullptr) break;
    ++examined;
    const std::string name = entry->d_name;
    if (name.rfind(prefix, 0) != 0) continue;
    if (const auto step = ddp::parse_uint(name.substr(prefix.size()), UINT32_MAX))
      steps.emplace_back(*step, name.substr(prefix.size()));
  }
  closedir(listing);
  std::sort(steps.rbegin(), steps.rend());
  std::vector<std::string> ids;
  for (const auto& step : steps) ids.push_back(step.second);
  return ids;
}

std::string size_text(uint64_t bytes) {
  return bytes >= 10240 ? std::to_string(bytes / 1024) + " KiB" : std::to_string(bytes) + " B";
}

// The output of srun before its first line about a failed task, without srun's own lines.
std::vector<std::string> output_before_failure(const std::string& text, std::size_t count) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("srun: error: ", 0) == 0 && !ddp::parse_srun_exits(line).empty()) break;
    if (line.rfind("srun: ", 0) == 0 || line.rfind("slurmstepd: ", 0) == 0) continue;
    lines.push_back(line);
  }
  if (lines.size() > count) lines.erase(lines.begin(), lines.end() - static_cast<std::ptrdiff_t>(count));
  return lines;
}

void print_indented(const std::string& text) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) std::cout << "  " << ddp::terminal_text(line, kMaxLine) << "\n";
}

void print_failure(const std::string& what, const ddp::FirstFailure& failure, const ddp::StepReports& reports,
                   const std::string& srun_output, const Args& args) {
  std::cout << "ddp-why: " << what << ": first failure: " << ddp::one_line(failure) << "\n";
  if (failure.report) {
    if (!failure.report->traceback.empty()) print_indented(failure.report->traceback);
    std::cout << "  report: " << ddp::terminal_text(failure.report->file, kMaxLine) << "\n";
  } else if (!srun_output.empty()) {
    if (const auto tail = ddp::task_output_tail(srun_output, failure.rank, args.lines)) {
      std::cout << "  last lines of task " << failure.rank << "'s output:\n";
      for (const auto& line : *tail) std::cout << "    " << ddp::terminal_text(line, kMaxLine) << "\n";
    } else {
      std::cout << "  srun's output is not labelled by task, so task " << failure.rank
                << "'s own lines cannot be told apart (srun --label labels them); the step's last lines before the "
                   "failure:\n";
      for (const auto& line : output_before_failure(srun_output, args.lines)) {
        std::cout << "    " << ddp::terminal_text(line, kMaxLine) << "\n";
      }
    }
  }
  std::size_t others = 0;
  for (const auto& report : reports.errors) {
    if (failure.report && report.file == failure.report->file) continue;
    if (others++ == 0) std::cout << "then:\n";
    if (others > 8) continue;
    ddp::FirstFailure other{report.rank, report.host, report, std::nullopt};
    std::cout << "  " << ddp::one_line(other) << "\n";
  }
  if (others > 8) {
    std::cout << "  ... and " << others - 8 << " more reports in " << ddp::terminal_text(reports.dir, kMaxLine) << "\n";
  }
  if (!reports.dumps.empty()) {
    std::cout << "NCCL flight-recorder dumps (" << reports.dumps.size() << ", PyTorch's TORCH_NCCL_DUMP_ON_TIMEOUT):\n";
    for (const auto& dump : reports.dumps) {
      std::cout << "  rank " << dump.rank << " on " << dump.host << ": " << ddp::terminal_text(dump.file, kMaxLine)
                << " (" << size_text(dump.bytes) << ")\n";
    }
  }
}

// "ddpuser(1001)" of another uid: that user's reports are in that user's log directory.
void refuse_other_users_job(const Args& args, const std::optional<JobInfo>& job) {
  if (!job || !args.log_dir.empty()) return;
  const std::size_t open = job->user_id.find('(');
  const auto uid = open == std::string::npos
                       ? std::nullopt
                       : ddp::parse_uint(job->user_id.substr(open + 1, job->user_id.size() - open - 2), UINT32_MAX);
  if (!uid || *uid == getuid()) return;
  throw ddp::Error("job " + args.job + " is " + job->user_id.substr(0, open) +
                   "'s: its reports are in that user's "
                   "DDP_LOG_DIR (default ~/.cache/slurm-ddp); give --log-dir DIR where you may read them");
}

// The rules every log directory follows (step_logs.hpp), for reading: the caller's own, or with --log-dir that
// directory's owner's (a team lead reading a member's reports), with nobody else able to plant a report there.
ddp::DirRules reading_rules(const Args& args, const std::string& base) {
  ddp::DirRules rules = ddp::log_dir_rules(false);
  rules.fix = "give --log-dir DIR where you may read the reports";
  struct stat info = {};
  if (!args.log_dir.empty() && lstat(base.c_str(), &info) == 0) rules.owner = info.st_uid;
  return rules;
}

void print_warnings(const ddp::StepReports& reports) {
  for (const auto& warning : reports.warnings)
    std::cerr << "ddp-why: warning: " << ddp::terminal_text(warning, 4096) << "\n";
}

int run(const Args& args) {
  const std::optional<JobInfo> job = scontrol_job(args.job);
  refuse_other_users_job(args, job);
  const std::string base = log_base(args);
  const ddp::DirRules rules = reading_rules(args, base);
  const ddp::UniqueFd base_fd = ddp::open_private_dir(base, rules);
  ddp::StepIdentity identity;
  identity.not_before = args.since_given ? args.since : (job ? job->start : 0);
  if (base_fd && identity.not_before > 0) {
    identity.not_before = ddp::on_file_clock(base_fd.get(), identity.not_before, ddp::wall_clock_seconds);
  }
  std::string srun_output;
  const std::string stderr_file = !args.stderr_file.empty() ? args.stderr_file : (job ? job->stderr_file : "");
  if (!stderr_file.empty()) {
    try {
      srun_output = read_tail(stderr_file);
    } catch (const ddp::Error& e) {
      if (!args.stderr_file.empty()) throw;
    }
  }
  std::vector<std::string> candidates;
  if (!args.step.empty()) {
    candidates = {args.step};
  } else if (base_fd) {
    candidates = step_ids(base_fd.get(), base, args.job);
  }
  ddp::StepReports reports;
  ddp::ReportLimits limits;  // one budget for every step examined
  std::string what = "job " + args.job;
  for (const std::string& step : candidates) {
    identity.run_id = args.job + "." + step;
    const std::string dir = ddp::step_log_dir(base, identity.run_id);
    ddp::StepReports found{dir, {}, {}, {}, 0};
    if (base_fd) {
      if (const ddp::UniqueFd step_fd = ddp::open_private_subdir(base_fd.get(), base, identity.run_id, rules)) {
        found = ddp::read_step_reports(step_fd.get(), dir, limits, identity);
      }
    }
    print_warnings(found);
    limits.max_total_bytes -= std::min(limits.max_total_bytes, found.bytes_read);
    if (!found.errors.empty() || !found.dumps.empty() || !args.step.empty() || limits.max_total_bytes == 0) {
      reports = std::move(found);
      what = "step " + identity.run_id;
      break;
    }
  }
  const auto failure = ddp::first_failure(reports, ddp::parse_srun_exits(srun_output));
  if (failure) {
    print_failure(what, *failure, reports, srun_output, args);
    return 0;
  }
  if (!reports.dumps.empty()) {
    print_failure(what,
                  ddp::FirstFailure{reports.dumps.front().rank, reports.dumps.front().host, std::nullopt, std::nullopt},
                  reports, "", args);
    return 0;
  }
  std::cout << "ddp-why: " << what << ": no failure found in "
            << ddp::terminal_text(reports.dir.empty() ? base : reports.dir, 4096)
            << (stderr_file.empty() ? "" : " nor in " + ddp::terminal_text(stderr_file, 4096))
            << " (the step succeeded, or its program writes no report: decorate its main with PyTorch's "
               "torch.distributed.elastic.multiprocessing.errors.record)\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args args = parse_args(argc, argv);
    if (args.help) {
      std::cout << usage();
      return 0;
    }
    return run(args);
  } catch (const ddp::Error& e) {
    std::cerr << "ddp-why: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "ddp-why: " << e.what() << "\n";
    return 2;
  }
}
