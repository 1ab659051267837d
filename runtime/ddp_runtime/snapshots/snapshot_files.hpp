#pragma once
// Snapshot files on disk: their names and run identity, the snapshot directory held open, atomic writes, safe
// reads, this run's files newest first, setting corrupt files aside and removing old ones. Plain POSIX: what a
// snapshot holds is snapshot.cpp's business.
//
// Every snapshot belongs to a run, and its name says which: "snapshot-e<epochs:6>-s<step:12>-r<run id>.pt". A run
// resumes from, prunes and cleans up after its own files only; what other runs (or anyone) put in the directory is
// left alone and never counted as newest.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/unique_fd.hpp"
#include "core/snapshot_dir.hpp"

namespace ddp::runtime {

// A snapshot that cannot be used for what it holds: not a regular file, truncated, inconsistent, failing its
// checksum, or not what its name says. Such a file is set aside and the previous snapshot tried.
class SnapshotCorrupt : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A snapshot that could not be read for a reason outside the file: an error the system reported (EIO, ETIMEDOUT on
// a soft NFS mount, ESTALE after a failover, EMFILE). The file may be whole: it is left as it is and the start
// fails, naming the file and the error, so that a restart tries it again.
class SnapshotUnreadable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The snapshot directory's storage failed, not a peer: kMaxFailedSnapshots snapshots in a row could not be written
// (a full disk, a quota, a soft NFS mount that timed out, a stale handle after a failover). The run ends with one
// line naming the directory and the last error, exit status 1; its "timed out" never passes for a lost peer.
class StorageFault : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// 1-64 characters of [A-Za-z0-9._-], not starting with '.'.
bool is_valid_run_id(const std::string& run_id);

struct SnapshotName {
  std::string run_id;
  int64_t epochs_run = 0;
  int64_t global_step = 0;
};

// Zero-padded, so that a directory listing sorts one run's snapshots by age too.
std::string snapshot_file_name(const SnapshotName& name);
std::optional<SnapshotName> parse_snapshot_file_name(const std::string& file_name);
std::string join_path(const std::string& dir, const std::string& file_name);

// The records of a zip archive (torch.save's format) as its central directory lists them, checked against the
// file's size: every record, local header and the directory itself lie inside the file, in order, without
// overlap. `read_at` reads exactly n bytes at an offset or throws. Throws SnapshotCorrupt.
struct ZipRecord {
  std::string name;
  uint64_t offset = 0;  // of the data
  uint64_t size = 0;
};
using ReadAt = std::function<void(uint64_t offset, void* buffer, std::size_t n)>;
std::vector<ZipRecord> read_zip_directory(uint64_t file_size, const ReadAt& read_at);

// A snapshot open for reading: a regular file (never a FIFO, a device or, in the snapshot directory, a symbolic
// link) whose size its zip directory accounts for, so that a reader allocates no more than the file holds.
// What the file holds throws SnapshotCorrupt; what the system reports (open, fstat, pread) SnapshotUnreadable.
class SnapshotFile {
 public:
  // A file the user named (--resume): links are followed, the target must be a regular file; a path that names
  // nothing is SnapshotCorrupt (bad input), other errors of open SnapshotUnreadable.
  static SnapshotFile open(const std::string& path);
  // A file in a snapshot directory held open: never through a link (a link is SnapshotCorrupt).
  static SnapshotFile open_in(int dir_fd, const std::string& dir, const std::string& name);

  const std::string& path() const { return path_; }
  uint64_t size() const { return size_; }
  // Up to n bytes at offset; fewer only at the end of the file. A read error throws SnapshotUnreadable.
  std::size_t read_some(uint64_t offset, void* buffer, std::size_t n) const;

 private:
  SnapshotFile(std::string path, UniqueFd fd);
  std::string path_;
  UniqueFd fd_;
  uint64_t size_ = 0;
};

// A file that appears under its name complete or not at all. It is written as a temporary in the same directory,
// "." + name + ".tmp-" + 32 random hex digits, created exclusively (O_EXCL, O_NOFOLLOW), mode 0600 and locked
// (flock) while it is written; commit() is fsync, rename, fsync of the directory. Destroyed without commit(), it
// leaves nothing behind.
class AtomicFile {
 public:
  // In the directory of dir_fd, which must stay open while this object lives.
  AtomicFile(int dir_fd, std::string dir, std::string name);
  // Anywhere (the final model): its directory is opened here.
  explicit AtomicFile(const std::string& path);
  AtomicFile(AtomicFile&&) = default;
  ~AtomicFile();

  // Never throws: it runs inside LibTorch's zip writer (C code, which an exception must not cross). The first
  // failure is kept, later writes are skipped, and commit() throws it.
  void write(const void* data, std::size_t size) noexcept;
  void commit();
  const std::string& path() const { return path_; }

 private:
  void create_temporary();
  std::string failure_;
  UniqueFd own_dir_;
  int dir_fd_ = -1;
  std::string path_;
  std::string name_;
  std::string temporary_;
  UniqueFd fd_;
};

// One run's view of its snapshot directory, held open.
class SnapshotFiles {
 public:
  // Opens dir under the snapshot directory rules (snapshot_dir.hpp), proves that a snapshot can be written there
  // (a probe written, fsync'ed, renamed, the directory fsync'ed, the probe removed), and removes the temporaries
  // of this run that no live writer holds (a killed writer's). Throws ddp::Error naming dir and the reason.
  SnapshotFiles(const std::string& dir, std::string run_id);

  const std::string& dir() const { return dir_.path(); }
  const std::string& run_id() const { return run_id_; }
  std::string path_of(const SnapshotName& name) const;

  // This run's snapshot files, the newest (highest global step) first.
  std::vector<SnapshotName> this_runs() const;
  // The run ids of the other runs with snapshots here, sorted.
  std::vector<std::string> other_runs() const;

  SnapshotFile open(const SnapshotName& name) const;
  AtomicFile create(const SnapshotName& name) const;
  // Another file of the run in the directory (a hidden one, never counted as a snapshot).
  AtomicFile create_file(const std::string& name) const;
  void remove(const SnapshotName& name) const;
  // Renames a file that failed to load to "<name>.corrupt": kept for a look, never read or counted again.
  // Returns the new path.
  std::string set_aside(const SnapshotName& name) const;

 private:
  void probe() const;
  void remove_stale_temporaries() const;
  std::vector<std::string> file_names() const;

  SnapshotDir dir_;
  std::string run_id_;
};

}  // namespace ddp::runtime
