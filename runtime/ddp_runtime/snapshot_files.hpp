#pragma once
// Snapshot files on disk: names, atomic writes, the newest-first listing and pruning. Plain POSIX: the
// contents are snapshot.cpp's business.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ddp::runtime {

struct SnapshotName {
  int64_t epochs_run = 0;
  int64_t global_step = 0;
};

// "snapshot-e<epochs run>-s<global step>.pt", zero-padded so that a directory listing sorts by age too.
std::string snapshot_file_name(const SnapshotName& name);
std::optional<SnapshotName> parse_snapshot_file_name(const std::string& file_name);
std::string join_path(const std::string& dir, const std::string& file_name);

// Paths of the snapshot files in dir, the newest (highest global step) first.
std::vector<std::string> snapshot_paths_newest_first(const std::string& dir);

void prune_snapshots(const std::string& dir, int keep);

// Creates dir where missing, proves it writable by writing and syncing a probe file, and removes temporaries
// that a killed writer left behind. Throws ddp::Error naming the directory and the reason.
void prepare_snapshot_dir(const std::string& dir);

// A file that appears under its name complete or not at all: written as a temporary in the same directory,
// then fsync, rename, fsync of the directory. Destroyed without commit(), it leaves nothing behind.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, std::size_t size);
  void commit();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::string temporary_;
  int fd_ = -1;
};

}  // namespace ddp::runtime
