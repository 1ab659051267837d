#include "report/step_logs.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "base/child_process.hpp"
#include "base/parse.hpp"
#include "base/user.hpp"
#include "core/env.hpp"
#include "core/env_names.hpp"
#include "core/error.hpp"

namespace ddp {
namespace {

std::string safe_host(const std::string& host) {
  std::string safe = host.empty() ? "unknown" : host;
  for (char& c : safe) {
    const bool keep =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    if (!keep) c = '_';
  }
  return safe;
}

constexpr std::size_t kMaxEntries = 1 << 16;  // entries of a log base or step directory examined, at most

std::string join(const std::string& base, const std::string& name) {
  return (base.size() > 1 && base.back() == '/' ? base.substr(0, base.size() - 1) : base) + "/" + name;
}

// The names in a directory opened under the rules, at most kMaxEntries.
std::vector<std::string> names_in(int dir_fd) {
  std::vector<std::string> names;
  const int listing_fd = fcntl(dir_fd, F_DUPFD_CLOEXEC, 0);
  DIR* listing = listing_fd >= 0 ? fdopendir(listing_fd) : nullptr;
  if (listing == nullptr) {
    if (listing_fd >= 0) close(listing_fd);
    throw Error(std::string("cannot list a log directory (") + std::strerror(errno) + ")");
  }
  while (const dirent* entry = readdir(listing)) {
    if (names.size() >= kMaxEntries) break;
    const std::string name = entry->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  closedir(listing);
  return names;
}

// Removes the regular files and links among `names` that `remove` picks; never follows a link.
size_t remove_files(int dir_fd, const std::vector<std::string>& names, bool (*remove)(std::string_view)) {
  size_t removed = 0;
  for (const std::string& name : names) {
    struct stat info = {};
    if (!remove(name) || fstatat(dir_fd, name.c_str(), &info, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if ((S_ISREG(info.st_mode) || S_ISLNK(info.st_mode)) && unlinkat(dir_fd, name.c_str(), 0) == 0) ++removed;
  }
  return removed;
}

bool is_any_report(std::string_view name) { return report_kind(name) != ReportKind::None; }
bool is_dump(std::string_view name) { return report_kind(name) == ReportKind::Dump; }

// The job's other steps' directories in the base: "<job>.<step>" with another step id.
std::vector<std::string> other_steps_of_job(const std::vector<std::string>& names, const std::string& run_id) {
  const std::string job_prefix = run_id.substr(0, run_id.find('.') + 1);
  std::vector<std::string> steps;
  for (const std::string& name : names) {
    if (name != run_id && name.rfind(job_prefix, 0) == 0 && parse_uint(name.substr(job_prefix.size()), UINT32_MAX)) {
      steps.push_back(name);
    }
  }
  return steps;
}

}  // namespace

std::optional<std::string> log_base(const std::optional<std::string>& ddp_log_dir, const std::string& home) {
  if (ddp_log_dir && !ddp_log_dir->empty()) {
    if ((*ddp_log_dir)[0] != '/') {
      throw Error(std::string(kLogDirVariable) + "=" + quote(*ddp_log_dir) +
                  " is not an absolute path; export it as a directory on shared storage, e.g. /fsx/$USER/ddp-logs");
    }
    return *ddp_log_dir;
  }
  if (home.empty() || home[0] != '/') return std::nullopt;
  return (home == "/" ? "" : home) + "/.cache/slurm-ddp";
}

std::optional<std::string> own_log_base() {
  const auto user = find_user(getuid());
  return log_base(process_environment()(kLogDirVariable), user ? user->home : "");
}

std::string step_log_dir(const std::string& base, const std::string& run_id) { return join(base, run_id); }

std::string error_file_name(uint32_t rank, const std::string& host) {
  return "error-rank" + std::to_string(rank) + "-" + safe_host(host) + ".json";
}

std::string nccl_dump_prefix(const std::string& host) { return "nccl-" + safe_host(host) + "-rank"; }

DirRules log_dir_rules(bool create) {
  DirRules rules;
  rules.noun = "log directory";
  rules.contents = "error reports";
  rules.fix = std::string("export ") + kLogDirVariable + "=<a directory of your own on shared storage>";
  rules.create = create;
  return rules;
}

UniqueFd open_step_log_dir(const std::string& base, const std::string& run_id, bool create) {
  const DirRules rules = log_dir_rules(create);
  const UniqueFd base_fd = open_private_dir(base, rules);
  if (!base_fd) return {};
  return open_private_subdir(base_fd.get(), base, run_id, rules);
}

void prepare_step_log_dir(const std::string& base, const std::string& run_id, std::chrono::milliseconds deadline) {
  const std::string dir = step_log_dir(base, run_id);
  if (base.empty() || base[0] != '/') {
    throw Error("log directory " + quote(dir) + " is not an absolute path; export " + kLogDirVariable +
                "=<a directory of your own on shared storage>");
  }
  const ChildOutcome outcome =
      check_in_child([&] { open_step_log_dir(base, run_id, true); }, deadline, "cannot check the log directory");
  if (outcome.end == ChildOutcome::End::TimedOut) {
    throw Error("log directory " + quote(dir) + " did not answer within " + seconds_text(deadline) +
                ": its file system hangs on this node; export " + kLogDirVariable +
                "=<a directory on another file system>");
  }
  if (outcome.end == ChildOutcome::End::Died) {
    throw Error("log directory " + quote(dir) + " could not be checked (the check died: " + outcome.death + ")");
  }
  if (!outcome.answer.empty()) throw Error(outcome.answer);
}

size_t start_step_log_dir(const std::string& base, const std::string& run_id) {
  const DirRules rules = log_dir_rules(true);
  const UniqueFd base_fd = open_private_dir(base, rules);
  const UniqueFd step_fd = open_private_subdir(base_fd.get(), base, run_id, rules);
  size_t removed = remove_files(step_fd.get(), names_in(step_fd.get()), is_any_report);
  for (const std::string& step : other_steps_of_job(names_in(base_fd.get()), run_id)) {
    try {
      const UniqueFd other = open_private_subdir(base_fd.get(), base, step, log_dir_rules(false));
      if (other) removed += remove_files(other.get(), names_in(other.get()), is_dump);
    } catch (const Error&) {
      // Not a directory under the rules: nothing of this job's to tidy there.
    }
  }
  return removed;
}

std::optional<std::string> finish_step_log_dir(const std::string& base, const std::string& run_id,
                                               const ReportLimits& limits) {
  const DirRules rules = log_dir_rules(false);
  const UniqueFd base_fd = open_private_dir(base, rules);
  if (!base_fd) return std::nullopt;
  const UniqueFd step_fd = open_private_subdir(base_fd.get(), base, run_id, rules);
  if (!step_fd) return std::nullopt;
  if (unlinkat(base_fd.get(), run_id.c_str(), AT_REMOVEDIR) == 0) return std::nullopt;
  const std::string dir = join(base, run_id);
  const StepReports reports = read_step_reports(step_fd.get(), dir, limits, StepIdentity{run_id, 0});
  const std::string why = "ddp-why " + run_id;
  if (const auto first = first_failure(reports, {})) {
    return "step " + run_id + " failed; first failure: " + one_line(*first) + " (" + why + " shows the whole report)";
  }
  return "step " + run_id + " failed; its reports are in " + quote(dir) + " (" + why + ")";
}

}  // namespace ddp
