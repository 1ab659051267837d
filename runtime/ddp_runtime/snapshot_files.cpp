#include "ddp_runtime/snapshot_files.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <tuple>

#include "error.hpp"

namespace ddp::runtime {
namespace {

const char kTemporaryPrefix[] = ".snapshot-";
const char kTemporaryMarker[] = ".tmp-";

std::string system_error(const std::string& what, const std::string& path) {
  return what + " " + path + ": " + std::strerror(errno);
}

std::string parent_dir(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string base_name(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::vector<std::string> file_names(const std::string& dir) {
  std::vector<std::string> names;
  DIR* handle = opendir(dir.c_str());
  if (handle == nullptr) return names;
  while (const dirent* entry = readdir(handle)) names.emplace_back(entry->d_name);
  closedir(handle);
  return names;
}

void fsync_dir(const std::string& dir) {
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error(system_error("cannot open directory", dir));
  const int rc = fsync(fd);
  close(fd);
  if (rc != 0) throw std::runtime_error(system_error("cannot fsync directory", dir));
}

void make_dirs(const std::string& dir) {
  struct stat info;
  if (stat(dir.c_str(), &info) == 0) {
    if (!S_ISDIR(info.st_mode))
      throw Error("snapshot directory " + dir + " exists but is not a directory; pass another --snapshot-dir");
    return;
  }
  const std::string parent = parent_dir(dir);
  if (parent != dir && parent != "." && parent != "/") make_dirs(parent);
  if (mkdir(dir.c_str(), 0777) != 0 && errno != EEXIST) {
    throw Error(system_error("cannot create snapshot directory", dir) + "; pass a writable --snapshot-dir");
  }
}

bool is_stale_temporary(const std::string& name) {
  return name.rfind(kTemporaryPrefix, 0) == 0 && name.find(kTemporaryMarker) != std::string::npos;
}

}  // namespace

std::string join_path(const std::string& dir, const std::string& file_name) {
  return dir.empty() || dir.back() == '/' ? dir + file_name : dir + "/" + file_name;
}

std::string snapshot_file_name(const SnapshotName& name) {
  char text[64];
  std::snprintf(text, sizeof text, "snapshot-e%06" PRId64 "-s%012" PRId64 ".pt", name.epochs_run, name.global_step);
  return text;
}

std::optional<SnapshotName> parse_snapshot_file_name(const std::string& file_name) {
  SnapshotName name;
  int consumed = 0;
  if (std::sscanf(file_name.c_str(), "snapshot-e%" SCNd64 "-s%" SCNd64 ".pt%n", &name.epochs_run, &name.global_step,
                  &consumed) != 2 ||
      static_cast<std::size_t>(consumed) != file_name.size() || file_name != snapshot_file_name(name)) {
    return std::nullopt;
  }
  return name;
}

std::vector<std::string> snapshot_paths_newest_first(const std::string& dir) {
  std::vector<std::pair<SnapshotName, std::string>> found;
  for (const std::string& file : file_names(dir)) {
    if (auto name = parse_snapshot_file_name(file)) found.emplace_back(*name, join_path(dir, file));
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) {
    return std::tie(a.first.global_step, a.first.epochs_run) > std::tie(b.first.global_step, b.first.epochs_run);
  });
  std::vector<std::string> paths;
  for (auto& entry : found) paths.push_back(std::move(entry.second));
  return paths;
}

void prune_snapshots(const std::string& dir, int keep) {
  const std::vector<std::string> paths = snapshot_paths_newest_first(dir);
  for (std::size_t i = static_cast<std::size_t>(keep); i < paths.size(); ++i) unlink(paths[i].c_str());
}

void prepare_snapshot_dir(const std::string& dir) {
  make_dirs(dir);
  for (const std::string& name : file_names(dir)) {
    if (is_stale_temporary(name)) unlink(join_path(dir, name).c_str());
  }
  try {
    AtomicFile probe(join_path(dir, "snapshot-probe"));
    probe.write("probe", 5);
  } catch (const std::exception& e) {
    throw Error(std::string("snapshot directory is not writable: ") + e.what() +
                "; pass a writable --snapshot-dir (or fix DDP_SNAPSHOT_DIR)");
  }
}

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  temporary_ =
      join_path(parent_dir(path_), kTemporaryPrefix + base_name(path_) + kTemporaryMarker + std::to_string(getpid()));
  fd_ = open(temporary_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw std::runtime_error(system_error("cannot create", temporary_));
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) {
    close(fd_);
    unlink(temporary_.c_str());
  }
}

void AtomicFile::write(const void* data, std::size_t size) {
  const char* bytes = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t written = ::write(fd_, bytes, size);
    if (written < 0 && errno == EINTR) continue;
    if (written < 0) throw std::runtime_error(system_error("cannot write", temporary_));
    bytes += written;
    size -= static_cast<std::size_t>(written);
  }
}

void AtomicFile::commit() {
  if (fsync(fd_) != 0) throw std::runtime_error(system_error("cannot fsync", temporary_));
  const int fd = fd_;
  fd_ = -1;
  if (close(fd) != 0) {
    unlink(temporary_.c_str());
    throw std::runtime_error(system_error("cannot close", temporary_));
  }
  if (rename(temporary_.c_str(), path_.c_str()) != 0) {
    const std::string message = system_error("cannot rename " + temporary_ + " to", path_);
    unlink(temporary_.c_str());
    throw std::runtime_error(message);
  }
  fsync_dir(parent_dir(path_));
}

}  // namespace ddp::runtime
