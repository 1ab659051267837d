#include "core/snapshot_dir.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "base/child_process.hpp"
#include "base/mount_view.hpp"
#include "base/parse.hpp"
#include "core/error.hpp"

namespace ddp {
namespace {

std::string checked_value(const std::string& value, const char* what, const std::string& path_template) {
  if (value.empty() && std::string(what) == "user name") {
    throw Error("snapshot directory " + quote(path_template) +
                ": the job's user has no name on this node (no passwd "
                "entry for its uid), so %u cannot be expanded; fix the node's user database or drop %u");
  }
  if (value.empty() || value == "." || value == ".." || value.find('/') != std::string::npos) {
    throw Error("snapshot directory " + quote(path_template) + ": the " + what + " " + quote(value) +
                " cannot be part of a path; rename it or give a snapshot directory without that %-sequence");
  }
  return value;
}

std::string mode_text(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

// Whether `uid` stands for root here: root itself, or, in a user namespace, the overflow uid that every owner it does
// not map shows, root's directories among them, unless that uid is itself mapped (snapshot_dir.hpp). Only the
// inside ids of uid_map are compared: its outside ids belong to the parent namespace, which may be nested too.
// Read each time: a process may unshare.
bool stands_for_root(uid_t uid) {
  if (uid == 0) return true;
  unsigned long overflow = 65534;
  if (std::FILE* file = std::fopen("/proc/sys/kernel/overflowuid", "re")) {
    if (std::fscanf(file, "%lu", &overflow) != 1) overflow = 65534;
    std::fclose(file);
  }
  if (uid != overflow) return false;
  std::FILE* map = std::fopen("/proc/self/uid_map", "re");
  if (map == nullptr) return false;
  unsigned long inside = 0, outside = 0, count = 0;
  bool mapped = false;
  while (std::fscanf(map, "%lu %lu %lu", &inside, &outside, &count) == 3) {
    mapped |= overflow >= inside && overflow - inside < count;
  }
  std::fclose(map);
  return !mapped;
}

// One walk under the rules of snapshot_dir.hpp; every refusal names the path and ends with the rules' fix.
class DirWalk {
 public:
  DirWalk(const std::string& path, const DirRules& rules)
      : path_(path), rules_(rules), owner_(rules.owner.value_or(geteuid())) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw Error(rules_.noun + " " + quote(path_) + " " + what + "; " + rules_.fix);
  }

  std::string errno_text(const std::string& component) const {
    return "(" + quote(component) + ": " + std::strerror(errno) + ")";
  }

  // A component above the directory that someone else owns, or that others may write without the sticky bit,
  // lets them move the directory away and put another in its place.
  void check_ancestor(const struct stat& info, const std::string& component) const {
    if (info.st_uid != owner_ && info.st_uid != geteuid() && !stands_for_root(info.st_uid)) {
      fail("lies in " + quote(component) + ", which uid " + std::to_string(info.st_uid) +
           " owns: its owner could replace the " + rules_.noun);
    }
    if ((info.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (info.st_mode & S_ISVTX) == 0) {
      fail("lies in " + quote(component) + ", which " + ((info.st_mode & S_IWOTH) != 0 ? "everyone" : "its group") +
           " may write (mode " + mode_text(info.st_mode) + ", no sticky bit): they could replace the " + rules_.noun +
           "; chmod +t or go-w it");
    }
  }

  [[noreturn]] void owned_by_another(const struct stat& info) const {
    const std::string whose =
        owner_ == geteuid() ? "you (uid " + std::to_string(owner_) + ")" : "uid " + std::to_string(owner_);
    fail("is owned by uid " + std::to_string(info.st_uid) + ", not by " + whose +
         ": its owner could read, replace or delete your " + rules_.contents);
  }

  void check_final(int fd, const std::string& path) const {
    struct stat info = {};
    if (fstat(fd, &info) != 0) fail("cannot be examined " + errno_text(path));
    if (info.st_uid != owner_) owned_by_another(info);
    if ((info.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
      fail("is writable by others (mode " + mode_text(info.st_mode) + "): they could plant or delete " +
           rules_.contents + "; chmod go-w it");
    }
    // Effective ids: the caller may be a process that dropped privileges with seteuid.
    const int access = rules_.create ? W_OK | X_OK : R_OK | X_OK;
    if (faccessat(fd, ".", access, AT_EACCESS) != 0) {
      fail(std::string(rules_.create ? "is not writable " : "is not readable ") + errno_text(path));
    }
  }

  // Empty when the component does not exist and nothing may be created.
  UniqueFd open_component(int parent, const std::string& name, const std::string& prefix, bool last) const {
    // Components above need only be searchable (O_PATH): /lustre/projects may well be mode 0711.
    const int flags = O_DIRECTORY | O_CLOEXEC | (last ? O_RDONLY | O_NOFOLLOW : O_PATH);
    UniqueFd fd(openat(parent, name.c_str(), flags));
    if (!fd && errno == ENOENT) {
      if (!rules_.create) return fd;
      const bool made = mkdirat(parent, name.c_str(), rules_.mode) == 0;
      if (!made && errno != EEXIST) fail("cannot be created " + errno_text(prefix));
      // What was just made must be what is opened: never a link someone put there in between.
      fd.reset(openat(parent, name.c_str(), flags | O_NOFOLLOW));
      // Whatever the process's umask took away (the last component only: the others are opened O_PATH).
      if (made && fd && last) fchmod(fd.get(), rules_.mode);
    }
    if (fd) return fd;
    const int error = errno;
    struct stat info = {};
    const bool seen = fstatat(parent, name.c_str(), &info, AT_SYMLINK_NOFOLLOW) == 0;
    // O_DIRECTORY | O_NOFOLLOW on a link says ENOTDIR or ELOOP, depending on the kernel.
    if (seen && last && S_ISLNK(info.st_mode)) fail("is a symbolic link; give the directory it points to");
    if (seen && last && S_ISDIR(info.st_mode) && info.st_uid != owner_) owned_by_another(info);
    errno = error;
    if (!seen) fail(std::string(rules_.create ? "cannot be created " : "cannot be opened ") + errno_text(prefix));
    if (errno == ENOTDIR)
      fail(last ? "is not a directory" : "cannot be created: " + quote(prefix) + " is not a directory");
    fail("cannot be opened " + errno_text(prefix));
  }

  UniqueFd open() const {
    if (path_.empty()) fail("is empty");
    std::vector<std::string> parts;
    for (size_t start = 0; start <= path_.size();) {
      const size_t slash = std::min(path_.find('/', start), path_.size());
      const std::string part = path_.substr(start, slash - start);
      if (!part.empty() && part != ".") parts.push_back(part);
      start = slash + 1;
    }
    const bool absolute = path_[0] == '/';
    UniqueFd current(::open(absolute ? "/" : ".", (parts.empty() ? O_RDONLY : O_PATH) | O_DIRECTORY | O_CLOEXEC));
    if (!current) fail("cannot be opened " + errno_text(absolute ? "/" : "."));
    std::string prefix = absolute ? "" : ".";
    for (size_t i = 0; i < parts.size(); ++i) {
      prefix += "/" + parts[i];
      const bool last = i + 1 == parts.size();
      UniqueFd next = open_component(current.get(), parts[i], prefix, last);
      if (!next) return next;
      if (!last) {
        struct stat info = {};
        if (fstat(next.get(), &info) != 0) fail("cannot be examined " + errno_text(prefix));
        check_ancestor(info, prefix);
      }
      current = std::move(next);
    }
    check_final(current.get(), path_);
    return current;
  }

  // `name`, one level below `parent`, a directory already opened under the rules.
  UniqueFd open_below(int parent, const std::string& name) const {
    if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos) fail("is not one name");
    UniqueFd fd = open_component(parent, name, path_, true);
    if (fd) check_final(fd.get(), path_);
    return fd;
  }

 private:
  const std::string& path_;
  const DirRules& rules_;
  const uid_t owner_;
};

DirRules snapshot_rules(const std::string& option) {
  DirRules rules;
  rules.fix = "use a directory of your own (" + option + ")";
  return rules;
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

UniqueFd open_private_dir(const std::string& path, const DirRules& rules) { return DirWalk(path, rules).open(); }

UniqueFd open_private_subdir(int parent, const std::string& parent_path, const std::string& name,
                             const DirRules& rules) {
  const bool slash = !parent_path.empty() && parent_path.back() == '/';
  const std::string path = parent_path + (slash ? "" : "/") + name;
  return DirWalk(path, rules).open_below(parent, name);
}

SnapshotDir SnapshotDir::open(const std::string& path, const std::string& option) {
  return SnapshotDir(path, open_private_dir(path, snapshot_rules(option)));
}

void prepare_snapshot_dir(const std::string& path, const std::string& option, std::chrono::milliseconds deadline,
                          const ContainerView* container) {
  const ChildOutcome outcome = check_in_child(
      [&] {
        if (container != nullptr) {
          require_node_file_system(path, "snapshot directory", container->node_devices, this_mount_view().mounts,
                                   container->mount_option);
        }
        SnapshotDir::open(path, option);
      },
      deadline, "cannot check the snapshot directory");
  if (outcome.end == ChildOutcome::End::TimedOut) {
    throw Error("snapshot directory " + quote(path) + " did not answer within " + seconds_text(deadline) +
                ": its file system hangs on this node; check the mount, or use another directory (" + option + ")");
  }
  if (outcome.end == ChildOutcome::End::Died) {
    throw Error("snapshot directory " + quote(path) + " could not be checked (the check died: " + outcome.death + ")");
  }
  if (!outcome.answer.empty()) throw Error(outcome.answer);
}

}  // namespace ddp
