#include "doctor/checks/storage.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <vector>

#include "base/parse.hpp"
#include "core/error.hpp"
#include "core/snapshot_dir.hpp"

namespace ddp::doctor {
namespace {

constexpr size_t kWriteChunk = 4u << 20;

std::string unique_name(const std::string& dir, const char* what) {
  std::random_device random;
  return dir + "/" + kDoctorFilePrefix + what + "-" + std::to_string(getpid()) + "-" + std::to_string(random());
}

struct FileSystemName {
  long magic;
  const char* name;
};

// statfs magic numbers of the file systems found under training data (linux/magic.h and the vendors' sources).
constexpr FileSystemName kFileSystems[] = {
    {0xEF53, "ext4"},       {0x58465342, "xfs"},       {0x9123683E, "btrfs"},  {0x2FC12FC1, "zfs"},
    {0x01021994, "tmpfs"},  {0x6969, "nfs"},           {0x0BD00BD0, "lustre"}, {0x47504653, "gpfs"},
    {0x19830326, "beegfs"}, {0x00C36400, "cephfs"},    {0xFF534D42, "cifs"},   {0xFE534D42, "smb2"},
    {0x65735546, "fuse"},   {0x794C7630, "overlayfs"}, {0x5346544E, "ntfs"},
};

std::string file_system_name(long magic) {
  for (const auto& fs : kFileSystems) {
    if (fs.magic == magic) return fs.name;
  }
  char text[32];
  std::snprintf(text, sizeof text, "fs 0x%lx", static_cast<unsigned long>(magic));
  return text;
}

bool is_network_file_system(const std::string& name) {
  return name == "nfs" || name == "lustre" || name == "gpfs" || name == "beegfs" || name == "cephfs" ||
         name == "cifs" || name == "smb2";
}

// "1" for a spinning disk, "0" for SSD/NVMe; empty when the directory is not on a local block device.
// A partition has no queue/ of its own: its parent device (one level up in sysfs) has.
std::string rotational(const std::string& sysfs_root, dev_t device, std::string& device_name) {
  const std::string base =
      sysfs_root + "/dev/block/" + std::to_string(major(device)) + ":" + std::to_string(minor(device));
  for (const std::string& dir : {base, base + "/.."}) {
    std::ifstream flag(dir + "/queue/rotational");
    std::string value;
    if (flag >> value) {
      char resolved[PATH_MAX];
      if (realpath(dir.c_str(), resolved) != nullptr) device_name = std::strrchr(resolved, '/') + 1;
      return value;
    }
  }
  return "";
}

}  // namespace

CheckResult check_snapshot_dir(const std::string& dir) {
  const CheckInfo& check = checks::kStorageDir;
  const std::string rules = "the snapshot directory rules";
  // The runtime would create a missing directory; the doctor reports it instead, since on a node where the shared
  // file system is not mounted, creating it would hide exactly that.
  struct stat info = {};
  if (stat(dir.c_str(), &info) != 0) {
    return make_result(check, Status::Fail, "missing", rules,
                       quote(dir) + ": " + std::strerror(errno) +
                           "; create it on storage every node shares, or pass another with --snapshot-dir");
  }
  try {
    SnapshotDir::open(dir, "--snapshot-dir");
  } catch (const Error& e) {
    return make_result(check, Status::Fail, "refused", rules, e.what());
  }
  return make_result(check, Status::Ok, "usable", rules, dir);
}

uint64_t guess_snapshot_bytes(const std::string& dir) {
  DIR* listing = opendir(dir.c_str());
  if (listing == nullptr) return kDefaultSnapshotBytes;
  uint64_t size = kDefaultSnapshotBytes;
  timespec newest{0, 0};
  while (const dirent* entry = readdir(listing)) {
    const std::string name = entry->d_name;
    // Hidden files are markers and temporaries (ours among them), not snapshots.
    if (name[0] == '.') continue;
    struct stat info = {};
    if (fstatat(dirfd(listing), entry->d_name, &info, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(info.st_mode)) continue;
    const bool newer = info.st_mtim.tv_sec > newest.tv_sec ||
                       (info.st_mtim.tv_sec == newest.tv_sec && info.st_mtim.tv_nsec > newest.tv_nsec);
    if (newer && info.st_size > 0) {
      newest = info.st_mtim;
      size = static_cast<uint64_t>(info.st_size);
    }
  }
  closedir(listing);
  return size;
}

CheckResult grade_free_space(uint64_t free_bytes, uint64_t snapshot_bytes) {
  const double snapshots = static_cast<double>(free_bytes) / static_cast<double>(snapshot_bytes);
  const Status status = grade_at_least(snapshots, 2, 1);
  const std::string detail =
      status == Status::Ok
          ? ""
          : "room for " + format_fixed(snapshots, 1) + " snapshot(s) of " + format_bytes(snapshot_bytes) +
                ": free space, choose a bigger file system, or tell --snapshot-size the real size";
  return make_result(checks::kStorageFree, status, format_bytes(free_bytes) + " free",
                     ">= 2 x " + format_bytes(snapshot_bytes), detail);
}

CheckResult check_free_space(const std::string& dir, uint64_t snapshot_bytes) {
  struct statvfs info = {};
  if (statvfs(dir.c_str(), &info) != 0) {
    return make_result(checks::kStorageFree, Status::Fail, "unknown", "",
                       "statvfs " + quote(dir) + ": " + std::strerror(errno));
  }
  return grade_free_space(static_cast<uint64_t>(info.f_bavail) * info.f_frsize, snapshot_bytes);
}

CheckResult check_storage_device(const std::string& dir, const std::string& sysfs_root) {
  const CheckInfo& check = checks::kStorageDevice;
  struct statfs fs = {};
  struct stat info = {};
  if (statfs(dir.c_str(), &fs) != 0 || stat(dir.c_str(), &info) != 0) {
    return make_result(check, Status::Fail, "unknown", "", quote(dir) + ": " + std::strerror(errno));
  }
  const std::string fs_name = file_system_name(static_cast<long>(fs.f_type));
  if (fs_name == "tmpfs") {
    return make_result(check, Status::Warn, "tmpfs", "ssd or shared fs",
                       "memory of this node: snapshots use RAM, stay on this node and are lost at reboot");
  }
  if (is_network_file_system(fs_name)) return make_result(check, Status::Ok, fs_name, "ssd or shared fs", "network");
  std::string device;
  const std::string spins = rotational(sysfs_root, info.st_dev, device);
  if (spins == "1") {
    return make_result(check, Status::Warn, fs_name + " on " + device + " (hdd)", "ssd or shared fs",
                       "the kernel reports a spinning disk: snapshots and data loading will be slow; use SSD/NVMe "
                       "(virtual disks may report this by default: storage.write_bw measures the real speed)");
  }
  if (spins == "0") return make_result(check, Status::Ok, fs_name + " on " + device + " (ssd)", "ssd or shared fs");
  return make_result(check, Status::Ok, fs_name, "ssd or shared fs", "no local block device to inspect");
}

WriteMeasurement measure_write(const std::string& dir, uint64_t bytes, std::chrono::milliseconds budget) {
  const std::string path = unique_name(dir, "write");
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) throw Error("cannot create a file in " + quote(dir) + ": " + std::strerror(errno));
  // Random bytes, so that a compressing or deduplicating file system cannot make the test look fast.
  std::vector<char> chunk(kWriteChunk);
  std::mt19937_64 random(42);
  for (size_t i = 0; i + 8 <= chunk.size(); i += 8) {
    const uint64_t word = random();
    std::memcpy(chunk.data() + i, &word, 8);
  }
  const auto start = std::chrono::steady_clock::now();
  const auto stop_at = start + budget;
  WriteMeasurement measured;
  std::string error;
  while (measured.bytes < bytes && std::chrono::steady_clock::now() < stop_at) {
    const size_t size = static_cast<size_t>(std::min<uint64_t>(chunk.size(), bytes - measured.bytes));
    const ssize_t written = write(fd, chunk.data(), size);
    if (written <= 0) {
      error = std::strerror(errno);
      break;
    }
    measured.bytes += static_cast<uint64_t>(written);
  }
  if (error.empty() && fsync(fd) != 0) error = std::strerror(errno);
  measured.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  close(fd);
  unlink(path.c_str());
  if (!error.empty()) throw Error("writing to " + quote(dir) + " failed: " + error);
  return measured;
}

CheckResult grade_write_bandwidth(const WriteMeasurement& measurement, double min_mbytes_per_second) {
  const double rate = measurement.seconds > 0 ? static_cast<double>(measurement.bytes) / measurement.seconds : 0;
  const Status status = grade_at_least(rate / 1e6, min_mbytes_per_second, 0);
  return make_result(checks::kStorageWriteBw, status, format_mbytes(rate),
                     ">= " + format_fixed(min_mbytes_per_second, 0) + " MB/s",
                     format_bytes(measurement.bytes) + " with fsync in " + format_seconds(measurement.seconds) +
                         (status == Status::Ok ? "" : "; snapshots will stall training: use faster storage"));
}

}  // namespace ddp::doctor
