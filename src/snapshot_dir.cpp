#include "snapshot_dir.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "error.hpp"
#include "parse.hpp"

namespace ddp {
namespace {

std::string checked_value(const std::string& value, const char* what, const std::string& path_template) {
  if (value.empty() || value == "." || value == ".." || value.find('/') != std::string::npos) {
    throw Error("snapshot directory " + quote(path_template) + ": the " + what + " " + quote(value) +
                " cannot be part of a path; rename it or give --ddp-snapshot-dir without that %-sequence");
  }
  return value;
}

[[noreturn]] void fail_dir(const std::string& path, const std::string& what) {
  throw Error("snapshot directory " + quote(path) + " " + what +
              "; choose a directory you can write with --ddp-snapshot-dir, or ask your admin about snapshot_dir");
}

}  // namespace

std::string expand_path_template(const std::string& path_template, const PathVars& vars) {
  std::string path;
  for (size_t i = 0; i < path_template.size(); ++i) {
    if (path_template[i] != '%') {
      path += path_template[i];
      continue;
    }
    const char code = i + 1 < path_template.size() ? path_template[++i] : '\0';
    switch (code) {
      case '%': path += '%'; break;
      case 'u': path += checked_value(vars.user, "user name", path_template); break;
      case 'j': path += checked_value(vars.job_id, "job id", path_template); break;
      case 'x': path += checked_value(vars.job_name, "job name", path_template); break;
      default:
        throw Error("snapshot directory " + quote(path_template) + ": unknown %-sequence " +
                    quote(std::string("%") + code) + "; use %u (user), %j (job id), %x (job name) or %%");
    }
  }
  if (path.empty() || path[0] != '/') {
    throw Error("snapshot directory " + quote(path_template) + " is not an absolute path; start it with /");
  }
  return path;
}

void prepare_snapshot_dir(const std::string& path) {
  // mkdir -p, one component at a time; existing components are left as they are.
  for (size_t slash = path.find('/', 1);; slash = path.find('/', slash + 1)) {
    const std::string prefix = path.substr(0, slash);
    if (!prefix.empty() && mkdir(prefix.c_str(), 0700) != 0 && errno != EEXIST) {
      fail_dir(path, "cannot be created (" + prefix + ": " + std::strerror(errno) + ")");
    }
    if (slash == std::string::npos) break;
  }
  struct stat info = {};
  if (stat(path.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) fail_dir(path, "is not a directory");
  // Effective ids: slurmstepd drops privileges with seteuid, and the check must be the user's.
  if (faccessat(AT_FDCWD, path.c_str(), W_OK | X_OK, AT_EACCESS) != 0) {
    fail_dir(path, std::string("is not writable (") + std::strerror(errno) + ")");
  }
}

}  // namespace ddp
