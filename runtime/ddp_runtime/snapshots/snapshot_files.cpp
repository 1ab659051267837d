#include "ddp_runtime/snapshots/snapshot_files.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <tuple>

#include "base/parse.hpp"
#include "base/random_hex.hpp"
#include "core/error.hpp"
#include "core/netif.hpp"

namespace ddp::runtime {
namespace {

constexpr char kTemporaryMarker[] = ".tmp-";
// A temporary whose writer ran on another node and that nobody has changed for this long is abandoned: a writer
// writes, fsyncs and renames it without a pause of that length. Younger ones are left alone: a lock taken on this
// node proves nothing about a writer on another where locks are node-local (Lustre's localflock, NFS's
// local_lock=flock), and a new rank 0 once removed its predecessor's temporary while it was still written.
constexpr std::chrono::hours kForeignTemporaryAge{1};
constexpr char kProbePrefix[] = ".ddp-probe-";
constexpr char kCorruptSuffix[] = ".corrupt";
constexpr std::size_t kMaxRunIdLength = 64;

std::string system_error(const std::string& what, const std::string& path) {
  return what + " " + path + ": " + std::strerror(errno);
}

// One line naming the file and the error, for a start that fails so that a restart tries again.
SnapshotUnreadable unreadable(const std::string& what, const std::string& path) {
  const int error = errno;
  return SnapshotUnreadable("cannot " + what + " snapshot " + path + ": " + std::strerror(error) + " (errno " +
                            std::to_string(error) +
                            "); it is left as it is: fix the file system or wait for it, then run the same command "
                            "again (ddp-restart does)");
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

bool same_file(const struct stat& a, const struct stat& b) { return a.st_dev == b.st_dev && a.st_ino == b.st_ino; }

// The file under `name` in dir is the one open as fd (nobody renamed or replaced it).
bool still_named(int dir_fd, const std::string& name, int fd) {
  struct stat named = {};
  struct stat open = {};
  return fstatat(dir_fd, name.c_str(), &named, AT_SYMLINK_NOFOLLOW) == 0 && fstat(fd, &open) == 0 &&
         same_file(named, open);
}

// Locks are how writers tell cleaners they are alive; file systems without them (some Lustre mounts) report
// one of these, and then nothing is ever removed as stale.
bool locks_unsupported(int error) {
  return error == ENOLCK || error == EOPNOTSUPP || error == ENOSYS || error == EINVAL;
}

// The node a temporary's writer runs on, as its name carries it (".<name>.tmp-<node>-<16 hex digits>"): host_name()
// where it is a plain host name, else "node".
std::string writer_node() {
  const std::string host = host_name();
  const bool plain = !host.empty() && host.size() <= 64 && std::all_of(host.begin(), host.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.';
  });
  return plain ? host : "node";
}

// The writer's node in a temporary's name after the marker; empty for a name of another form (an older ddp-train's
// ".tmp-<32 hex digits>", which said no node).
std::string node_of_temporary(const std::string& suffix) {
  const std::size_t dash = suffix.rfind('-');
  if (dash == std::string::npos || dash == 0 || suffix.size() - dash - 1 != 16) return "";
  return suffix.substr(0, dash);
}

void fsync_dir(int dir_fd, const std::string& dir) {
  if (fsync(dir_fd) != 0) throw std::runtime_error(system_error("cannot fsync directory", dir));
}

// --- zip directory -----------------------------------------------------------------------------------------------

constexpr uint32_t kEndOfDirectory = 0x06054b50;
constexpr uint32_t kZip64EndOfDirectory = 0x06064b50;
constexpr uint32_t kZip64Locator = 0x07064b50;
constexpr uint32_t kDirectoryEntry = 0x02014b50;
constexpr uint32_t kLocalHeader = 0x04034b50;
constexpr std::size_t kEndOfDirectorySize = 22;
constexpr std::size_t kZip64LocatorSize = 20;
constexpr std::size_t kZip64EndOfDirectorySize = 56;
constexpr std::size_t kDirectoryEntrySize = 46;
constexpr std::size_t kLocalHeaderSize = 30;
constexpr uint64_t kMaxRecords = 1 << 20;  // far above any state dict; bounds the work on a hostile directory

uint64_t little_endian(const unsigned char* bytes, int size) {
  uint64_t value = 0;
  for (int i = size - 1; i >= 0; --i) value = (value << 8) | bytes[i];
  return value;
}

[[noreturn]] void bad_zip(const std::string& what) { throw SnapshotCorrupt("is not a whole snapshot: " + what); }

struct Directory {
  uint64_t entries = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
  uint64_t end = 0;  // where the records that follow the directory start
};

Directory find_directory(uint64_t file_size, const ReadAt& read_at) {
  if (file_size < kEndOfDirectorySize) bad_zip("too short for a zip archive");
  // The end record is followed only by its comment (at most 65535 bytes).
  const uint64_t window = std::min<uint64_t>(file_size, kEndOfDirectorySize + 65535);
  std::vector<unsigned char> tail(static_cast<std::size_t>(window));
  read_at(file_size - window, tail.data(), tail.size());
  for (std::size_t at = tail.size() - kEndOfDirectorySize + 1; at-- > 0;) {
    const unsigned char* e = tail.data() + at;
    if (little_endian(e, 4) != kEndOfDirectory || at + kEndOfDirectorySize + little_endian(e + 20, 2) != tail.size())
      continue;
    Directory d;
    d.end = file_size - window + at;
    d.entries = little_endian(e + 10, 2);
    d.size = little_endian(e + 12, 4);
    d.offset = little_endian(e + 16, 4);
    if (little_endian(e + 4, 2) != 0 || little_endian(e + 6, 2) != 0) bad_zip("a multi-part archive");
    if (d.entries == 0xffff || d.size == 0xffffffff || d.offset == 0xffffffff) {
      if (d.end < kZip64LocatorSize) bad_zip("a zip64 archive without its locator");
      unsigned char locator[kZip64LocatorSize];
      read_at(d.end - kZip64LocatorSize, locator, sizeof locator);
      if (little_endian(locator, 4) != kZip64Locator) bad_zip("a zip64 archive without its locator");
      const uint64_t record = little_endian(locator + 8, 8);
      if (record > d.end - kZip64LocatorSize || d.end - kZip64LocatorSize - record < kZip64EndOfDirectorySize) {
        bad_zip("its zip64 end record lies outside the file");
      }
      unsigned char z[kZip64EndOfDirectorySize];
      read_at(record, z, sizeof z);
      if (little_endian(z, 4) != kZip64EndOfDirectory) bad_zip("its zip64 end record is missing");
      d.entries = little_endian(z + 32, 8);
      d.size = little_endian(z + 40, 8);
      d.offset = little_endian(z + 48, 8);
      d.end = record;
    }
    if (d.offset > d.end || d.size > d.end - d.offset) bad_zip("its directory lies outside the file");
    if (d.entries > kMaxRecords || d.entries > d.size / kDirectoryEntrySize)
      bad_zip("its directory lists too many records");
    return d;
  }
  bad_zip("no zip directory at its end (truncated?)");
}

// The zip64 extra field holds, in this order, the 64-bit values whose 32-bit fields are all ones.
void apply_zip64_extra(const unsigned char* extra, std::size_t length, uint64_t& size, uint64_t& compressed,
                       uint64_t& offset) {
  for (std::size_t at = 0; at + 4 <= length;) {
    const uint64_t id = little_endian(extra + at, 2);
    const std::size_t field = static_cast<std::size_t>(little_endian(extra + at + 2, 2));
    if (at + 4 + field > length) bad_zip("a record's extra field is cut");
    if (id == 1) {
      std::size_t used = 0;
      for (uint64_t* value : {&size, &compressed, &offset}) {
        if (*value != 0xffffffff) continue;
        if (used + 8 > field) bad_zip("a record's zip64 field is cut");
        *value = little_endian(extra + at + 4 + used, 8);
        used += 8;
      }
    }
    at += 4 + field;
  }
}

}  // namespace

// --- names -------------------------------------------------------------------------------------------------------

bool is_valid_run_id(const std::string& run_id) {
  if (run_id.empty() || run_id.size() > kMaxRunIdLength || run_id[0] == '.') return false;
  return std::all_of(run_id.begin(), run_id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
           c == '-';
  });
}

std::string join_path(const std::string& dir, const std::string& file_name) {
  return dir.empty() || dir.back() == '/' ? dir + file_name : dir + "/" + file_name;
}

std::string snapshot_file_name(const SnapshotName& name) {
  char text[64];
  std::snprintf(text, sizeof text, "snapshot-e%06" PRId64 "-s%012" PRId64 "-r", name.epochs_run, name.global_step);
  return text + name.run_id + ".pt";
}

std::optional<SnapshotName> parse_snapshot_file_name(const std::string& file_name) {
  SnapshotName name;
  int consumed = 0;
  if (std::sscanf(file_name.c_str(), "snapshot-e%" SCNd64 "-s%" SCNd64 "-r%n", &name.epochs_run, &name.global_step,
                  &consumed) != 2 ||
      consumed <= 0 || file_name.size() < static_cast<std::size_t>(consumed) + 3 ||
      file_name.compare(file_name.size() - 3, 3, ".pt") != 0) {
    return std::nullopt;
  }
  name.run_id =
      file_name.substr(static_cast<std::size_t>(consumed), file_name.size() - 3 - static_cast<std::size_t>(consumed));
  if (name.epochs_run < 0 || name.global_step < 0 || !is_valid_run_id(name.run_id) ||
      file_name != snapshot_file_name(name)) {
    return std::nullopt;
  }
  return name;
}

// --- reading -----------------------------------------------------------------------------------------------------

std::vector<ZipRecord> read_zip_directory(uint64_t file_size, const ReadAt& read_at) {
  const Directory d = find_directory(file_size, read_at);
  std::vector<unsigned char> listing(static_cast<std::size_t>(d.size));
  read_at(d.offset, listing.data(), listing.size());
  std::vector<ZipRecord> records;
  std::vector<std::pair<uint64_t, uint64_t>> extents;  // [local header, end of data) of each record
  for (std::size_t at = 0; records.size() < d.entries;) {
    if (listing.size() - at < kDirectoryEntrySize) bad_zip("its directory is cut");
    const unsigned char* e = listing.data() + at;
    if (little_endian(e, 4) != kDirectoryEntry) bad_zip("its directory holds something else");
    const std::size_t name_length = static_cast<std::size_t>(little_endian(e + 28, 2));
    const std::size_t extra_length = static_cast<std::size_t>(little_endian(e + 30, 2));
    const std::size_t comment_length = static_cast<std::size_t>(little_endian(e + 32, 2));
    if (listing.size() - at - kDirectoryEntrySize < name_length + extra_length + comment_length) {
      bad_zip("its directory is cut");
    }
    if (little_endian(e + 10, 2) != 0) bad_zip("a record is compressed (torch.save stores them as they are)");
    uint64_t compressed = little_endian(e + 20, 4);
    uint64_t size = little_endian(e + 24, 4);
    uint64_t local = little_endian(e + 42, 4);
    apply_zip64_extra(e + kDirectoryEntrySize + name_length, extra_length, size, compressed, local);
    if (compressed != size) bad_zip("a record's sizes disagree");
    ZipRecord record;
    record.name.assign(reinterpret_cast<const char*>(e + kDirectoryEntrySize), name_length);
    if (local > d.offset || d.offset - local < kLocalHeaderSize) bad_zip("a record lies outside the file");
    unsigned char header[kLocalHeaderSize];
    read_at(local, header, sizeof header);
    if (little_endian(header, 4) != kLocalHeader) bad_zip("a record's header is missing");
    const uint64_t data = local + kLocalHeaderSize + little_endian(header + 26, 2) + little_endian(header + 28, 2);
    if (data > d.offset || size > d.offset - data) bad_zip("record " + quote(record.name) + " runs past the data");
    record.offset = data;
    record.size = size;
    extents.emplace_back(local, data + size);
    records.push_back(std::move(record));
    at += kDirectoryEntrySize + name_length + extra_length + comment_length;
  }
  std::sort(extents.begin(), extents.end());
  for (std::size_t i = 1; i < extents.size(); ++i) {
    if (extents[i].first < extents[i - 1].second) bad_zip("two records overlap");
  }
  return records;
}

SnapshotFile::SnapshotFile(std::string path, UniqueFd fd) : path_(std::move(path)), fd_(std::move(fd)) {
  struct stat info = {};
  if (fstat(fd_.get(), &info) != 0) throw unreadable("examine", path_);
  if (!S_ISREG(info.st_mode)) {
    throw SnapshotCorrupt(path_ + " is not a regular file (a FIFO, a device or a socket); name a snapshot file");
  }
  size_ = static_cast<uint64_t>(info.st_size);
  try {
    read_zip_directory(size_, [this](uint64_t offset, void* buffer, std::size_t n) {
      if (read_some(offset, buffer, n) != n) throw SnapshotCorrupt("is not a whole snapshot: it is cut short");
    });
  } catch (const SnapshotCorrupt& e) {
    throw SnapshotCorrupt(path_ + " " + e.what());
  }
}

SnapshotFile SnapshotFile::open(const std::string& path) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer; what is not a regular file is refused right after.
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
  if (!fd && (errno == ENOENT || errno == ENOTDIR)) throw SnapshotCorrupt(system_error("cannot open", path));
  if (!fd) throw unreadable("open", path);
  return SnapshotFile(path, std::move(fd));
}

SnapshotFile SnapshotFile::open_in(int dir_fd, const std::string& dir, const std::string& name) {
  const std::string path = join_path(dir, name);
  UniqueFd fd(openat(dir_fd, name.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK | O_NOFOLLOW));
  if (!fd && errno == ELOOP) throw SnapshotCorrupt(path + " is a symbolic link, not a snapshot");
  if (!fd) throw unreadable("open", path);
  return SnapshotFile(path, std::move(fd));
}

std::size_t SnapshotFile::read_some(uint64_t offset, void* buffer, std::size_t n) const {
  std::size_t done = 0;
  while (done < n) {
    const ssize_t got =
        pread(fd_.get(), static_cast<char*>(buffer) + done, n - done, static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw unreadable("read", path_);
    if (got == 0) break;
    done += static_cast<std::size_t>(got);
  }
  return done;
}

// --- writing -----------------------------------------------------------------------------------------------------

AtomicFile::AtomicFile(int dir_fd, std::string dir, std::string name)
    : dir_fd_(dir_fd), path_(join_path(dir, name)), name_(std::move(name)) {
  create_temporary();
}

AtomicFile::AtomicFile(const std::string& path) : path_(path), name_(base_name(path)) {
  own_dir_.reset(::open(parent_dir(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!own_dir_) throw std::runtime_error(system_error("cannot open the directory of", path));
  dir_fd_ = own_dir_.get();
  create_temporary();
}

void AtomicFile::create_temporary() {
  for (int attempt = 0; attempt < 10; ++attempt) {
    temporary_ = "." + name_ + kTemporaryMarker + writer_node() + "-" + random_hex(16, "a temporary file name");
    UniqueFd fd(openat(dir_fd_, temporary_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!fd && errno == EEXIST) continue;
    if (!fd) throw std::runtime_error(system_error("cannot create", join_path(parent_dir(path_), temporary_)));
    // Held until the file is renamed: a cleaner that cannot take the lock knows a writer is alive. Should a
    // cleaner have taken it first and removed the name, this file is no longer the temporary: make another.
    if (flock(fd.get(), LOCK_EX | LOCK_NB) != 0 && !locks_unsupported(errno)) continue;
    if (!still_named(dir_fd_, temporary_, fd.get())) continue;
    fd_ = std::move(fd);
    return;
  }
  throw std::runtime_error("cannot create a temporary file for " + path_ + " (10 attempts)");
}

AtomicFile::~AtomicFile() {
  if (fd_) unlinkat(dir_fd_, temporary_.c_str(), 0);
}

void AtomicFile::write(const void* data, std::size_t size) noexcept {
  const char* bytes = static_cast<const char*>(data);
  while (size > 0 && failure_.empty()) {
    const ssize_t written = ::write(fd_.get(), bytes, size);
    if (written < 0 && errno == EINTR) continue;
    if (written < 0) {
      try {
        failure_ = system_error("cannot write", join_path(parent_dir(path_), temporary_));
      } catch (...) {
        failure_ = "cannot write";
      }
      return;
    }
    bytes += written;
    size -= static_cast<std::size_t>(written);
  }
}

void AtomicFile::commit() {
  if (!failure_.empty()) throw std::runtime_error(failure_);
  const std::string temporary_path = join_path(parent_dir(path_), temporary_);
  if (fsync(fd_.get()) != 0) throw std::runtime_error(system_error("cannot fsync", temporary_path));
  if (renameat(dir_fd_, temporary_.c_str(), dir_fd_, name_.c_str()) != 0) {
    throw std::runtime_error(system_error("cannot rename " + temporary_path + " to", path_));
  }
  // Renamed: nothing of ours is left under the temporary name for the destructor to remove.
  const int fd = fd_.release();
  const int closed = ::close(fd);
  if (closed != 0) throw std::runtime_error(system_error("cannot close", path_));
  fsync_dir(dir_fd_, parent_dir(path_));
}

// --- the directory -----------------------------------------------------------------------------------------------

SnapshotFiles::SnapshotFiles(const std::string& dir, std::string run_id)
    : dir_(SnapshotDir::open(dir, "--snapshot-dir or DDP_SNAPSHOT_DIR")), run_id_(std::move(run_id)) {
  probe();
  remove_stale_temporaries();
}

void SnapshotFiles::probe() const {
  const std::string name = kProbePrefix + random_hex(16, "a temporary file name");
  try {
    AtomicFile probe(dir_.fd(), dir(), name);
    probe.write("probe", 5);
    probe.commit();
  } catch (const std::exception& e) {
    throw Error("snapshot directory " + quote(dir()) + " cannot hold a snapshot: " + e.what() +
                "; free space, fix the file system or pass another --snapshot-dir (or DDP_SNAPSHOT_DIR)");
  }
  if (unlinkat(dir_.fd(), name.c_str(), 0) != 0) {
    throw Error("snapshot directory " + quote(dir()) +
                " cannot hold a snapshot: " + system_error("cannot remove", join_path(dir(), name)) +
                "; pass another --snapshot-dir (or DDP_SNAPSHOT_DIR)");
  }
}

std::vector<std::string> SnapshotFiles::file_names() const {
  std::vector<std::string> names;
  // A description of its own: the held descriptor's offset stays untouched.
  const int fd = openat(dir_.fd(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error(system_error("cannot list", dir()));
  DIR* handle = fdopendir(fd);
  if (handle == nullptr) {
    ::close(fd);
    throw std::runtime_error(system_error("cannot list", dir()));
  }
  while (const dirent* entry = readdir(handle)) names.emplace_back(entry->d_name);
  closedir(handle);
  return names;
}

void SnapshotFiles::remove_stale_temporaries() const {
  for (const std::string& name : file_names()) {
    const std::size_t marker = name.rfind(kTemporaryMarker);
    if (name[0] != '.' || marker == std::string::npos) continue;
    const auto snapshot = parse_snapshot_file_name(name.substr(1, marker - 1));
    if (!snapshot || snapshot->run_id != run_id_) continue;
    UniqueFd fd(openat(dir_.fd(), name.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY));
    struct stat info = {};
    if (!fd || fstat(fd.get(), &info) != 0 || !S_ISREG(info.st_mode)) continue;
    // Another node's writer (or one that did not say where it ran) may hold a lock this node cannot see.
    if (node_of_temporary(name.substr(marker + std::strlen(kTemporaryMarker))) != writer_node()) {
      const auto changed = std::chrono::system_clock::from_time_t(info.st_mtim.tv_sec);
      if (std::chrono::system_clock::now() - changed < kForeignTemporaryAge) continue;
    }
    // A writer holds its temporary locked until the rename; one that can be locked belongs to a dead writer.
    if (flock(fd.get(), LOCK_EX | LOCK_NB) != 0) continue;
    if (still_named(dir_.fd(), name, fd.get())) unlinkat(dir_.fd(), name.c_str(), 0);
  }
}

std::string SnapshotFiles::path_of(const SnapshotName& name) const {
  return join_path(dir(), snapshot_file_name(name));
}

std::vector<SnapshotName> SnapshotFiles::this_runs() const {
  std::vector<SnapshotName> found;
  for (const std::string& file : file_names()) {
    auto name = parse_snapshot_file_name(file);
    if (name && name->run_id == run_id_) found.push_back(std::move(*name));
  }
  std::sort(found.begin(), found.end(), [](const SnapshotName& a, const SnapshotName& b) {
    return std::tie(a.global_step, a.epochs_run) > std::tie(b.global_step, b.epochs_run);
  });
  return found;
}

std::vector<std::string> SnapshotFiles::other_runs() const {
  std::vector<std::string> runs;
  for (const std::string& file : file_names()) {
    const auto name = parse_snapshot_file_name(file);
    if (name && name->run_id != run_id_) runs.push_back(name->run_id);
  }
  std::sort(runs.begin(), runs.end());
  runs.erase(std::unique(runs.begin(), runs.end()), runs.end());
  return runs;
}

SnapshotFile SnapshotFiles::open(const SnapshotName& name) const {
  return SnapshotFile::open_in(dir_.fd(), dir(), snapshot_file_name(name));
}

AtomicFile SnapshotFiles::create(const SnapshotName& name) const {
  return AtomicFile(dir_.fd(), dir(), snapshot_file_name(name));
}

AtomicFile SnapshotFiles::create_file(const std::string& name) const { return AtomicFile(dir_.fd(), dir(), name); }

void SnapshotFiles::remove(const SnapshotName& name) const { unlinkat(dir_.fd(), snapshot_file_name(name).c_str(), 0); }

std::string SnapshotFiles::set_aside(const SnapshotName& name) const {
  const std::string file = snapshot_file_name(name);
  const std::string aside = file + kCorruptSuffix;
  if (renameat(dir_.fd(), file.c_str(), dir_.fd(), aside.c_str()) != 0) {
    throw std::runtime_error(system_error("cannot set aside", join_path(dir(), file)));
  }
  return join_path(dir(), aside);
}

}  // namespace ddp::runtime
