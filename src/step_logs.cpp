#include "step_logs.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "env.hpp"
#include "error.hpp"
#include "parse.hpp"
#include "user.hpp"

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

[[noreturn]] void fail_dir(const std::string& dir, const std::string& what) {
  throw Error("log directory " + quote(dir) + " " + what + "; export " + kLogDirVariable +
              "=<a directory you can write on shared storage>");
}

// ENOTDIR and EACCES here are the directory's own problems: not a directory, or not the user's to write.
void remove_stale(const std::string& dir, const std::string& name) {
  if (unlink((dir + "/" + name).c_str()) == 0 || errno == ENOENT) return;
  if (errno == ENOTDIR) fail_dir(dir, "is not a directory");
  fail_dir(dir, "is not writable (" + std::string(std::strerror(errno)) + ")");
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

std::string step_log_dir(const std::string& base, const std::string& run_id) {
  return (base.size() > 1 && base.back() == '/' ? base.substr(0, base.size() - 1) : base) + "/" + run_id;
}

std::string error_file_name(uint32_t rank, const std::string& host) {
  return "error-rank" + std::to_string(rank) + "-" + safe_host(host) + ".json";
}

std::string nccl_dump_prefix(const std::string& host) { return "nccl-" + safe_host(host) + "-rank"; }

void add_failure_reporting(TaskEnv& env, const std::optional<std::string>& step_dir, uint32_t rank,
                           const std::string& host) {
  if (step_dir) env.set("TORCHELASTIC_ERROR_FILE", *step_dir + "/" + error_file_name(rank, host));
  // A collective that hangs ends the process after its timeout instead of holding the allocation (PyTorch's
  // default since 2.2: tear down without aborting communicators, an abort can hang itself), with the flight
  // recorder's last collectives dumped where ddp-why finds them.
  env.set_default("TORCH_NCCL_ASYNC_ERROR_HANDLING", "3");
  env.set_default("TORCH_NCCL_DUMP_ON_TIMEOUT", "1");
  env.set_default("TORCH_NCCL_TRACE_BUFFER_SIZE", "2000");
  if (step_dir) env.set_default("TORCH_NCCL_DEBUG_INFO_TEMP_FILE", *step_dir + "/" + nccl_dump_prefix(host));
}

void prepare_step_log_dir(const std::string& step_dir, uint32_t rank, const std::string& host) {
  if (step_dir.empty() || step_dir[0] != '/') fail_dir(step_dir, "is not an absolute path");
  // Every task of a large step does this on shared storage at once: the common case costs three calls (the
  // directory exists, this task's stale reports do not), and a directory made here holds nothing stale.
  if (mkdir(step_dir.c_str(), 0700) == 0) return;
  if (errno == ENOENT) {
    // mkdir -p, one component at a time; existing components are left as they are.
    for (size_t slash = step_dir.find('/', 1);; slash = step_dir.find('/', slash + 1)) {
      const std::string prefix = step_dir.substr(0, slash);
      if (mkdir(prefix.c_str(), 0700) != 0 && errno != EEXIST) {
        fail_dir(step_dir, "cannot be created (" + prefix + ": " + std::strerror(errno) + ")");
      }
      if (slash == std::string::npos) return;
    }
  }
  if (errno != EEXIST) fail_dir(step_dir, std::string("cannot be created (") + std::strerror(errno) + ")");
  remove_stale(step_dir, error_file_name(rank, host));
  remove_stale(step_dir, nccl_dump_prefix(host) + std::to_string(rank));
}

bool remove_step_log_dir_if_empty(const std::string& step_dir) {
  if (rmdir(step_dir.c_str()) == 0) return false;
  return errno == ENOTEMPTY || errno == EEXIST;
}

}  // namespace ddp
