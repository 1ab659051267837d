#include "report/failure_report.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/json_string.hpp"
#include "base/parse.hpp"
#include "core/env_names.hpp"
#include "core/error.hpp"
#include "core/netif.hpp"
#include "core/redact.hpp"

namespace ddp {
namespace {

using nlohmann::json;

// Failures that follow from another rank's: the peer's process or connection went away.
constexpr const char* kConsequences[] = {"Connection closed by peer", "Connection reset by peer", "Broken pipe",
                                         "communicator was aborted", "NCCL communicator was aborted"};

bool is_consequence(const std::string& message) {
  return std::any_of(std::begin(kConsequences), std::end(kConsequences),
                     [&](const char* text) { return message.find(text) != std::string::npos; });
}

std::optional<int64_t> whole_number(const json& value) {
  if (value.is_number_integer()) return value.get<int64_t>();
  if (value.is_string()) {
    const auto parsed = parse_uint(value.get<std::string>(), INT64_MAX);
    if (parsed) return static_cast<int64_t>(*parsed);
  }
  return std::nullopt;
}

std::string string_of(const json& object, const char* key) {
  const auto found = object.find(key);
  return found != object.end() && found->is_string() ? found->get<std::string>() : "";
}

// Hand-written scanners: the text is the user's (srun's output holds the tasks' own lines, of any length), and
// std::regex recurses per character.
bool take(std::string_view& text, std::string_view prefix) {
  if (text.substr(0, prefix.size()) != prefix) return false;
  text.remove_prefix(prefix.size());
  return true;
}

std::optional<uint32_t> take_number(std::string_view& text) {
  std::size_t digits = 0;
  while (digits < text.size() && digits < 10 && text[digits] >= '0' && text[digits] <= '9') ++digits;
  const auto value = parse_uint(text.substr(0, digits), UINT32_MAX);
  if (value) text.remove_prefix(digits);
  return value ? std::optional<uint32_t>(static_cast<uint32_t>(*value)) : std::nullopt;
}

bool is_host_text(std::string_view text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
           c == '-';
  });
}

// "error-rank<R>-<host>.json" and "nccl-<host>-rank<R>": the names step_logs.cpp gives.
bool parse_error_name(std::string_view name, uint32_t* rank, std::string* host) {
  if (!take(name, "error-rank")) return false;
  const auto number = take_number(name);
  constexpr std::string_view kSuffix = ".json";
  if (!number || !take(name, "-") || name.size() <= kSuffix.size() ||
      name.substr(name.size() - kSuffix.size()) != kSuffix) {
    return false;
  }
  name.remove_suffix(kSuffix.size());
  if (!is_host_text(name)) return false;
  *rank = *number;
  *host = std::string(name);
  return true;
}

bool parse_dump_name(std::string_view name, uint32_t* rank, std::string* host) {
  if (!take(name, "nccl-")) return false;
  const std::size_t cut = name.rfind("-rank");
  if (cut == std::string_view::npos || !is_host_text(name.substr(0, cut))) return false;
  std::string_view tail = name.substr(cut + 5);
  const auto number = take_number(tail);
  if (!number || !tail.empty()) return false;
  *host = std::string(name.substr(0, cut));
  *rank = *number;
  return true;
}

// "srun: error: node2: tasks 0-1,3: Killed"
std::optional<TaskExit> parse_srun_exit(std::string_view line) {
  if (!take(line, "srun: error: ")) return std::nullopt;
  const std::size_t colon = line.find(": ");
  if (colon == std::string_view::npos || !is_host_text(line.substr(0, colon))) return std::nullopt;
  TaskExit exit;
  exit.node = std::string(line.substr(0, colon));
  line.remove_prefix(colon + 2);
  if (!take(line, "tasks ") && !take(line, "task ")) return std::nullopt;
  const auto first = take_number(line);
  if (!first) return std::nullopt;
  exit.first_task = exit.last_task = *first;
  if (take(line, "-")) {
    const auto last = take_number(line);
    if (!last || *last < *first) return std::nullopt;
    exit.last_task = *last;
  }
  const std::size_t status = line.find(": ");
  if (status == std::string_view::npos || status + 2 >= line.size()) return std::nullopt;
  exit.status = std::string(line.substr(status + 2));
  const std::size_t code = exit.status.rfind("exit code ");
  if (code != std::string::npos) {
    std::string_view digits = std::string_view(exit.status).substr(code + 10);
    if (const auto value = take_number(digits); value && *value <= 255) exit.exit_code = static_cast<int>(*value);
  }
  return exit;
}

// A regular file of at most `max_bytes`, read without following a link or blocking on a FIFO.
std::optional<std::string> read_small_file(int dir_fd, const std::string& name, std::size_t max_bytes, std::string* why,
                                           struct stat* info) {
  const int fd = openat(dir_fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    *why = std::string("cannot be opened (") + std::strerror(errno) + ")";
    return std::nullopt;
  }
  std::string text;
  bool ok = fstat(fd, info) == 0 && S_ISREG(info->st_mode);
  if (!ok) *why = "is not a regular file";
  if (ok && static_cast<uint64_t>(info->st_size) > max_bytes) {
    *why =
        "is " + std::to_string(info->st_size) + " bytes, more than a report can be (" + std::to_string(max_bytes) + ")";
    ok = false;
  }
  if (ok) {
    text.resize(static_cast<std::size_t>(info->st_size));
    std::size_t done = 0;
    while (done < text.size()) {
      const ssize_t n = read(fd, text.data() + done, text.size() - done);
      if (n <= 0) break;
      done += static_cast<std::size_t>(n);
    }
    text.resize(done);
  }
  close(fd);
  if (!ok) return std::nullopt;
  return text;
}

double modification_time(const struct stat& info) {
  return static_cast<double>(info.st_mtim.tv_sec) + static_cast<double>(info.st_mtim.tv_nsec) * 1e-9;
}

// An error file found in the listing, not read yet.
struct Candidate {
  std::string name;
  uint32_t rank = 0;
  std::string host;
  double time = 0;
  uint64_t bytes = 0;
};

void read_error_file(int dir_fd, const std::string& dir, const Candidate& candidate, const ReportLimits& limits,
                     const StepIdentity& identity, std::size_t* budget, StepReports& out) {
  const std::string path = dir + "/" + candidate.name;
  std::string why;
  struct stat info = {};
  const auto text = read_small_file(dir_fd, candidate.name, limits.max_file_bytes, &why, &info);
  if (text) *budget -= std::min(*budget, text->size());
  std::optional<ErrorReport> report;
  if (text) report = parse_error_report(*text, &why);
  if (report && !identity.run_id.empty() && !report->run_id.empty() && report->run_id != identity.run_id) {
    why = "is from step " + quote(report->run_id) + ", not " + identity.run_id;
    report.reset();
  }
  if (!report) {
    out.warnings.push_back(path + " " + why + "; ignored");
    return;
  }
  report->rank = candidate.rank;
  report->host = candidate.host;
  report->file = path;
  report->time = modification_time(info);
  out.errors.push_back(std::move(*report));
}

std::vector<std::string> names_in(int dir_fd, const std::string& dir, std::size_t max_entries, StepReports& out) {
  const int listing_fd = fcntl(dir_fd, F_DUPFD_CLOEXEC, 0);
  DIR* listing = listing_fd >= 0 ? fdopendir(listing_fd) : nullptr;
  if (listing == nullptr) {
    if (listing_fd >= 0) close(listing_fd);
    throw Error("cannot read " + quote(dir) + " (" + std::strerror(errno) + ")");
  }
  std::vector<std::string> names;
  while (const dirent* entry = readdir(listing)) {
    if (names.size() >= max_entries) {
      out.warnings.push_back(dir + " has more than " + std::to_string(max_entries) + " entries; the rest ignored");
      break;
    }
    names.emplace_back(entry->d_name);
  }
  closedir(listing);
  return names;
}

// RANK as a number when it is one, else 0 (a single process has none).
std::string rank_number(const EnvLookup& env) {
  const std::string rank = env(vars::kRank).value_or("0");
  const bool digits = !rank.empty() && rank.size() < 10 && rank.find_first_not_of("0123456789") == std::string::npos;
  return digits ? std::to_string(std::stoul(rank)) : "0";
}

}  // namespace

std::string error_report_json(const std::string& message, int exit_status, const EnvLookup& env, double time) {
  return "{\"message\": {\"message\": " + json_string(redact_key_material(message)) +
         ", \"errorCode\": " + std::to_string(exit_status) + ", \"extraInfo\": {\"timestamp\": \"" +
         std::to_string(static_cast<long long>(time)) +
         "\", \"run_id\": " + json_string(env(vars::kRunId).value_or("")) + ", \"rank\": " + rank_number(env) +
         ", \"hostname\": " + json_string(host_name()) + ", \"program\": \"ddp-train\"}}}\n";
}

bool write_error_report(const std::string& message, int exit_status, const EnvLookup& env, std::string* why) {
  const auto path = env(vars::kErrorFile);
  if (!path || path->empty()) return true;
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  const std::string text = error_report_json(message, exit_status, env, now);
  const std::string temporary = *path + ".tmp." + std::to_string(getpid());
  const int fd = open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  bool ok = fd >= 0;
  if (ok) ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  if (fd >= 0) ok = close(fd) == 0 && ok;
  if (ok) ok = rename(temporary.c_str(), path->c_str()) == 0;
  if (!ok) {
    *why = "cannot write the error report " + *path + ": " + std::strerror(errno);
    unlink(temporary.c_str());
  }
  return ok;
}

std::optional<ErrorReport> parse_error_report(const std::string& text, std::string* why) {
  const json root = json::parse(text, nullptr, false);
  if (root.is_discarded()) {
    *why = "is not JSON";
    return std::nullopt;
  }
  const auto message = root.is_object() ? root.find("message") : root.end();
  if (!root.is_object() || message == root.end()) {
    *why = "has no \"message\": not a torchrun error file";
    return std::nullopt;
  }
  ErrorReport report;
  if (message->is_string()) {
    report.message = message->get<std::string>();
  } else if (message->is_object()) {
    report.message = string_of(*message, "message");
    const auto extra = message->find("extraInfo");
    if (extra != message->end() && extra->is_object()) {
      report.traceback = string_of(*extra, "py_callstack");
      report.run_id = string_of(*extra, "run_id");
    }
    const auto code = message->find("errorCode");
    if (code != message->end()) {
      const auto value = whole_number(*code);
      if (value && *value >= 0 && *value <= 255) report.exit_code = static_cast<int>(*value);  // an exit status
    }
  } else {
    *why = "has a \"message\" that is neither text nor an object: not a torchrun error file";
    return std::nullopt;
  }
  if (report.message.empty() && report.traceback.empty()) {
    *why = "has an empty message";
    return std::nullopt;
  }
  report.consequence = is_consequence(report.message);
  return report;
}

double wall_clock_seconds() {
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  return static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) * 1e-9;
}

double on_file_clock(int dir_fd, double local, const std::function<double()>& local_now) {
  char name[64];
  std::snprintf(name, sizeof name, ".ddp-clock-%d-%lx", static_cast<int>(getpid()),
                static_cast<unsigned long>(local_now() * 1e6));
  const double before = local_now();
  const int fd = openat(dir_fd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return local;
  // The file's times are set when it is created: by the file server for NFS, by this node for a local or Lustre
  // file system. A write makes sure the server stamps it.
  const bool written = write(fd, "t", 1) == 1;
  struct stat info = {};
  const bool stamped = written && fstat(fd, &info) == 0;
  const double after = local_now();
  close(fd);
  unlinkat(dir_fd, name, 0);
  if (!stamped) return local;
  return local + (modification_time(info) - (before + after) / 2);
}

ReportKind report_kind(std::string_view name) {
  uint32_t rank = 0;
  std::string host;
  if (parse_error_name(name, &rank, &host)) return ReportKind::Error;
  if (parse_dump_name(name, &rank, &host)) return ReportKind::Dump;
  return ReportKind::None;
}

StepReports read_step_reports(int dir_fd, const std::string& dir, const ReportLimits& limits,
                              const StepIdentity& identity) {
  StepReports out;
  out.dir = dir;
  std::vector<Candidate> candidates;
  for (const std::string& name : names_in(dir_fd, dir, limits.max_entries, out)) {
    Candidate found{name, 0, "", 0, 0};
    const bool error = parse_error_name(name, &found.rank, &found.host);
    if (!error && !parse_dump_name(name, &found.rank, &found.host)) continue;
    struct stat info = {};
    if (fstatat(dir_fd, name.c_str(), &info, AT_SYMLINK_NOFOLLOW) != 0) continue;
    found.time = modification_time(info);
    found.bytes = static_cast<uint64_t>(info.st_size);
    if (found.time < identity.not_before) {
      if (error) {
        out.warnings.push_back(dir + "/" + name + " was written at " + format_time(found.time) +
                               ", before the step started: an earlier step's; ignored");
      }
    } else if (!S_ISREG(info.st_mode)) {
      if (error) out.warnings.push_back(dir + "/" + name + " is not a regular file; ignored");
    } else if (error) {
      candidates.push_back(std::move(found));
    } else {
      out.dumps.push_back({found.rank, found.host, dir + "/" + name, static_cast<uint64_t>(info.st_size)});
    }
  }
  // The oldest first: when the budget runs out, what is left unread is what came after the first failure.
  std::sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    return a.time != b.time ? a.time < b.time : a.rank < b.rank;
  });
  std::size_t budget = limits.max_total_bytes;
  const auto spent = [&] { return limits.max_total_bytes - budget; };
  std::size_t unread = 0;
  for (const Candidate& candidate : candidates) {
    // A report larger than a report can be is refused by read_error_file, with its own warning.
    if (candidate.bytes <= limits.max_file_bytes && candidate.bytes > budget) budget = 0;
    if (budget == 0) {
      ++unread;
      continue;
    }
    read_error_file(dir_fd, dir, candidate, limits, identity, &budget, out);
  }
  out.bytes_read = spent();
  if (unread > 0) {
    out.warnings.push_back(dir + ": " + std::to_string(unread) + " later reports not read (" +
                           std::to_string(limits.max_total_bytes) + " bytes of reports read in all)");
  }
  std::sort(out.errors.begin(), out.errors.end(), [](const ErrorReport& a, const ErrorReport& b) {
    return a.time != b.time ? a.time < b.time : a.rank < b.rank;
  });
  std::sort(out.dumps.begin(), out.dumps.end(),
            [](const FlightRecorderDump& a, const FlightRecorderDump& b) { return a.rank < b.rank; });
  return out;
}

StepReports read_step_reports(const std::string& dir, const ReportLimits& limits, const StepIdentity& identity) {
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return StepReports{dir, {}, {}, {}};
    throw Error("cannot read " + quote(dir) + " (" + std::strerror(errno) + ")");
  }
  try {
    StepReports reports = read_step_reports(fd, dir, limits, identity);
    close(fd);
    return reports;
  } catch (...) {
    close(fd);
    throw;
  }
}

std::vector<TaskExit> parse_srun_exits(const std::string& srun_stderr) {
  std::vector<TaskExit> exits;
  std::istringstream lines(srun_stderr);
  std::string line;
  while (std::getline(lines, line)) {
    if (auto exit = parse_srun_exit(line)) exits.push_back(std::move(*exit));
  }
  return exits;
}

std::optional<FirstFailure> first_failure(const StepReports& reports, const std::vector<TaskExit>& exits) {
  if (!exits.empty()) {
    const TaskExit& first = exits.front();
    FirstFailure failure;
    failure.rank = first.first_task;
    failure.host = first.node;
    failure.exit = first;
    // Of the tasks on that line, the one that reported first.
    for (const ErrorReport& report : reports.errors) {
      if (report.rank >= first.first_task && report.rank <= first.last_task) {
        failure.rank = report.rank;
        failure.report = report;
        break;
      }
    }
    return failure;
  }
  if (reports.errors.empty()) return std::nullopt;
  const auto cause = std::find_if(reports.errors.begin(), reports.errors.end(),
                                  [](const ErrorReport& report) { return !report.consequence; });
  const ErrorReport& report = cause != reports.errors.end() ? *cause : reports.errors.front();
  return FirstFailure{report.rank, report.host, report, std::nullopt};
}

std::string one_line(const FirstFailure& failure) {
  std::string line = "rank " + std::to_string(failure.rank) + " on " + terminal_text(failure.host, 256);
  if (failure.exit) {
    line += ", " + terminal_text(failure.exit->status, 400);
  } else if (failure.report && failure.report->exit_code) {
    line += ", exit code " + std::to_string(*failure.report->exit_code);
  }
  if (failure.report) {
    line += ", at " + format_time(failure.report->time);
    std::string message = failure.report->message;
    if (message.empty()) message = failure.report->traceback;
    line += ": " + terminal_text(message.substr(0, message.find('\n')), 400);
  } else {
    line += " (no error report: it was killed, crashed, or its program does not write one)";
  }
  return line;
}

std::optional<std::vector<std::string>> task_output_tail(const std::string& srun_output, uint32_t rank,
                                                         std::size_t count) {
  std::vector<std::string> mine;
  bool any_label = false;
  std::istringstream lines(srun_output);
  std::string line;
  while (std::getline(lines, line)) {
    std::string_view text = line;
    while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
    const auto task = take_number(text);
    if (!task || !take(text, ": ")) continue;
    any_label = true;
    if (*task == rank) mine.emplace_back(text);
  }
  if (!any_label) return std::nullopt;
  if (mine.size() > count) mine.erase(mine.begin(), mine.end() - static_cast<std::ptrdiff_t>(count));
  return mine;
}

std::string format_time(double seconds_since_epoch) {
  const auto whole = static_cast<time_t>(std::floor(seconds_since_epoch));
  const int millis = static_cast<int>((seconds_since_epoch - static_cast<double>(whole)) * 1000);
  struct tm local = {};
  localtime_r(&whole, &local);
  char text[64];
  const std::size_t n = std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S", &local);
  std::snprintf(text + n, sizeof text - n, ".%03d", std::clamp(millis, 0, 999));
  return text;
}

}  // namespace ddp
