#include "snapshot_dir.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "error.hpp"
#include "mount_view.hpp"
#include "parse.hpp"

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

class DirWalk {
 public:
  DirWalk(const std::string& path, const std::string& option) : path_(path), option_(option) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw Error("snapshot directory " + quote(path_) + " " + what + "; use a directory of your own (" + option_ + ")");
  }

  std::string errno_text(const std::string& component) const {
    return "(" + quote(component) + ": " + std::strerror(errno) + ")";
  }

  // A component above the snapshot directory that anyone may write, without the sticky bit, lets its owner
  // move the snapshot directory away and put another in its place.
  void check_ancestor(const struct stat& info, const std::string& component) const {
    if ((info.st_mode & S_IWOTH) != 0 && (info.st_mode & S_ISVTX) == 0 && info.st_uid != 0 &&
        info.st_uid != geteuid()) {
      fail("lies in " + quote(component) + ", which uid " + std::to_string(info.st_uid) +
           " owns and everyone may write: its owner could replace the snapshot directory");
    }
  }

  [[noreturn]] void owned_by_another(const struct stat& info) const {
    fail("is owned by uid " + std::to_string(info.st_uid) + ", not by you (uid " + std::to_string(geteuid()) +
         "): its owner could read, replace or delete your snapshots");
  }

  void check_final(int fd) const {
    struct stat info = {};
    if (fstat(fd, &info) != 0) fail("cannot be examined " + errno_text(path_));
    if (info.st_uid != geteuid()) owned_by_another(info);
    if ((info.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
      char mode[8];
      std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(info.st_mode & 07777));
      fail(std::string("is writable by others (mode ") + mode +
           "): they could plant or delete snapshots; chmod go-w it");
    }
    // Effective ids: the caller may be a process that dropped privileges with seteuid.
    if (faccessat(fd, ".", W_OK | X_OK, AT_EACCESS) != 0) fail("is not writable " + errno_text(path_));
  }

  UniqueFd open_component(int parent, const std::string& name, const std::string& prefix, bool last) const {
    // Components above need only be searchable (O_PATH): /lustre/projects may well be mode 0711.
    const int flags = O_DIRECTORY | O_CLOEXEC | (last ? O_RDONLY | O_NOFOLLOW : O_PATH);
    UniqueFd fd(openat(parent, name.c_str(), flags));
    if (!fd && errno == ENOENT) {
      if (mkdirat(parent, name.c_str(), 0700) != 0 && errno != EEXIST) fail("cannot be created " + errno_text(prefix));
      // What was just made must be what is opened: never a link someone put there in between.
      fd.reset(openat(parent, name.c_str(), flags | O_NOFOLLOW));
    }
    if (fd) return fd;
    const int error = errno;
    struct stat info = {};
    const bool seen = fstatat(parent, name.c_str(), &info, AT_SYMLINK_NOFOLLOW) == 0;
    // O_DIRECTORY | O_NOFOLLOW on a link says ENOTDIR or ELOOP, depending on the kernel.
    if (seen && last && S_ISLNK(info.st_mode)) fail("is a symbolic link; give the directory it points to");
    if (seen && last && S_ISDIR(info.st_mode) && info.st_uid != geteuid()) owned_by_another(info);
    errno = error;
    if (!seen) fail("cannot be created " + errno_text(prefix));
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
      if (!last) {
        struct stat info = {};
        if (fstat(next.get(), &info) != 0) fail("cannot be examined " + errno_text(prefix));
        check_ancestor(info, prefix);
      }
      current = std::move(next);
    }
    check_final(current.get());
    return current;
  }

 private:
  const std::string& path_;
  const std::string& option_;
};

void write_all(int fd, const std::string& text) {
  for (size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

std::string seconds_text(std::chrono::milliseconds duration) {
  char text[32];
  std::snprintf(text, sizeof text, "%g s", static_cast<double>(duration.count()) / 1000.0);
  return text;
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

SnapshotDir SnapshotDir::open(const std::string& path, const std::string& option) {
  return SnapshotDir(path, DirWalk(path, option).open());
}

void prepare_snapshot_dir(const std::string& path, const std::string& option, std::chrono::milliseconds deadline,
                          const ContainerView* container) {
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0)
    throw Error(std::string("cannot check the snapshot directory: ") + std::strerror(errno));
  UniqueFd read_end(pipe_fds[0]);
  UniqueFd write_end(pipe_fds[1]);
  const pid_t child = fork();
  if (child < 0) throw Error(std::string("cannot check the snapshot directory: ") + std::strerror(errno));
  if (child == 0) {
    // Nothing but the answer may outlive the deadline with this child: a task's output pipes held here would
    // keep the step waiting for their end.
    const int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    for (int fd = 0; fd < 3 && null >= 0; ++fd) dup2(null, fd);
    if (dup2(write_end.get(), 3) != 3) _exit(1);
    closefrom(4);
    std::string message;
    try {
      if (container != nullptr) {
        require_node_file_system(path, "snapshot directory", container->node_devices, this_mount_view().mounts,
                                 container->mount_option);
      }
      SnapshotDir::open(path, option);
    } catch (const std::exception& e) {
      message = e.what();
    }
    write_all(3, message.empty() ? "ok" : message);
    _exit(0);
  }
  write_end.reset();
  std::string answer;
  const auto end = std::chrono::steady_clock::now() + deadline;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
    pollfd waiting{read_end.get(), POLLIN, 0};
    const int ready = left.count() > 0 ? poll(&waiting, 1, static_cast<int>(left.count())) : 0;
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) {
      // A child stuck in the file system cannot always be reaped; it goes when the file system answers.
      kill(child, SIGKILL);
      waitpid(child, nullptr, WNOHANG);
      throw Error("snapshot directory " + quote(path) + " did not answer within " + seconds_text(deadline) +
                  ": its file system hangs on this node; "
                  "check the mount, or use another directory (" +
                  option + ")");
    }
    char buffer[512];
    const ssize_t n = ::read(read_end.get(), buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (answer.size() < 4096) answer.append(buffer, static_cast<size_t>(n));
  }
  waitpid(child, nullptr, 0);
  if (answer.empty()) throw Error("snapshot directory " + quote(path) + " could not be checked (the check died)");
  if (answer != "ok") throw Error(answer);
}

}  // namespace ddp
