#pragma once
// The snapshot directory as the training will use it: there, writable, room for a snapshot, on what kind of
// device, and how fast it takes data with fsync.
#include <chrono>
#include <cstdint>
#include <string>

#include "doctor/checks/check.hpp"

namespace ddp::doctor {

inline constexpr uint64_t kDefaultSnapshotBytes = 1ull << 30;

// storage.dir: exists and follows the rules the plugin and the runtime apply (SnapshotDir::open in
// snapshot_dir.hpp: the calling user's own directory, writable by nobody else, in no directory another user could
// swap it out of); the detail of a FAIL is the core's own message.
CheckResult check_snapshot_dir(const std::string& dir);

// The size of the newest regular, non-hidden file in `dir` (the last snapshot), else kDefaultSnapshotBytes.
uint64_t guess_snapshot_bytes(const std::string& dir);

// storage.free: FAIL with room for less than one snapshot, WARN for less than two (the next snapshot is written
// beside the last one before it replaces it).
CheckResult check_free_space(const std::string& dir, uint64_t snapshot_bytes);
CheckResult grade_free_space(uint64_t free_bytes, uint64_t snapshot_bytes);

// storage.device: the file system, and for a local disk whether it spins (HDD) or not. WARN on an HDD and on
// tmpfs (memory: gone after a reboot, and node-local).
CheckResult check_storage_device(const std::string& dir, const std::string& sysfs_root = "/sys");

// Writes up to `bytes` to a temporary file in `dir`, fsyncs it and removes it; stops early at `budget` and
// reports what it measured up to then. Throws ddp::Error when the file cannot be written.
struct WriteMeasurement {
  uint64_t bytes = 0;
  double seconds = 0;
};
WriteMeasurement measure_write(const std::string& dir, uint64_t bytes, std::chrono::milliseconds budget);
// storage.write_bw: WARN under min_mbytes_per_second.
CheckResult grade_write_bandwidth(const WriteMeasurement& measurement, double min_mbytes_per_second);

// Names of the doctor's own files in a snapshot directory start with this, so that a leftover is recognised.
inline constexpr const char* kDoctorFilePrefix = ".ddp-doctor-";

}  // namespace ddp::doctor
