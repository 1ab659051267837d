#include "doctor/checks/storage.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <utime.h>

#include <filesystem>

#include "core/error.hpp"
#include "core/snapshot_dir.hpp"
#include "test_support.hpp"

namespace ddp::doctor {
namespace {

using testing::contains;
using testing::TempDir;
using testing::write_file;

size_t entries_in(const std::string& dir) {
  size_t count = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(dir)) ++count;
  return count;
}

TEST(SnapshotDir, WritableDirectoryPassesAndKeepsNoProbe) {
  TempDir dir;
  const CheckResult result = check_snapshot_dir(dir.path());
  EXPECT_EQ(result.status, Status::Ok);
  EXPECT_EQ(entries_in(dir.path()), 0u);
}

TEST(SnapshotDir, MissingOrNotADirectoryFails) {
  TempDir dir;
  const CheckResult missing = check_snapshot_dir(dir / "nope");
  EXPECT_EQ(missing.status, Status::Fail);
  EXPECT_TRUE(contains(missing.detail, "No such file or directory"));
  write_file(dir / "file", "x");
  const CheckResult file = check_snapshot_dir(dir / "file");
  EXPECT_EQ(file.status, Status::Fail);
  EXPECT_TRUE(contains(file.detail, "is not a directory")) << file.detail;
}

// The doctor applies the core's rules, so it refuses what the plugin and the runtime would refuse, in their words.
std::string core_refusal(const std::string& dir) {
  return ddp::testing::error_of<Error>([&] { SnapshotDir::open(dir, "--snapshot-dir"); });
}

TEST(SnapshotDir, ADirectoryOthersMayWriteFailsWithTheCoreMessage) {
  TempDir dir;
  chmod(dir.path().c_str(), 0777);
  const CheckResult result = check_snapshot_dir(dir.path());
  EXPECT_EQ(result.status, Status::Fail);
  EXPECT_EQ(result.value, "refused");
  EXPECT_TRUE(contains(result.detail, "is writable by others (mode 0777)")) << result.detail;
  EXPECT_EQ(result.detail, core_refusal(dir.path()));
}

// Root writes anywhere and owns what tests make, so these run in a child that has become an ordinary user, as the
// task does; the child's exit status carries the verdict.
int check_as_nobody(const std::string& dir, const std::string& expected) {
  const pid_t child = fork();
  if (child == 0) {
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(3);
    const CheckResult result = check_snapshot_dir(dir);
    _exit(result.status == Status::Fail && contains(result.detail, expected) && result.detail == core_refusal(dir) ? 0
                                                                                                                   : 1);
  }
  int status = 0;
  waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(SnapshotDir, AnotherUsersDirectoryFails) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to switch users";
  TempDir dir;
  chmod(dir.path().c_str(), 0755);
  EXPECT_EQ(check_as_nobody(dir.path(), "is owned by uid 0, not by you (uid 65534)"), 0);
}

TEST(SnapshotDir, AnOwnDirectoryTheUserCannotWriteFails) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to switch users";
  TempDir dir;
  const std::string own = dir / "own";
  chmod(dir.path().c_str(), 0755);
  mkdir(own.c_str(), 0555);
  ASSERT_EQ(chown(own.c_str(), 65534, 65534), 0);
  EXPECT_EQ(check_as_nobody(own, "is not writable"), 0);
}

TEST(SnapshotSize, NewestVisibleFileElseOneGiB) {
  TempDir dir;
  EXPECT_EQ(guess_snapshot_bytes(dir.path()), kDefaultSnapshotBytes);
  write_file(dir / "step-100.pt", std::string(3000, 'a'));
  write_file(dir / "step-200.pt", std::string(5000, 'b'));
  write_file(dir / ".ddp-doctor-write-1-2", std::string(9000, 'c'));  // a leftover of ours does not count
  write_file(dir / ".node", "node1\n");                               // nor does any other hidden marker, however new
  std::filesystem::create_directory(dir / "subdir");
  utimbuf old_time{1000, 1000};
  utime((dir / "step-100.pt").c_str(), &old_time);
  EXPECT_EQ(guess_snapshot_bytes(dir.path()), 5000u);
  EXPECT_EQ(guess_snapshot_bytes(dir / "nope"), kDefaultSnapshotBytes);
}

TEST(FreeSpace, RoomForTwoSnapshotsPassesOneWarnsLessFails) {
  const uint64_t gib = 1ull << 30;
  EXPECT_EQ(grade_free_space(2 * gib, gib).status, Status::Ok);
  const CheckResult warn = grade_free_space(gib + gib / 2, gib);
  EXPECT_EQ(warn.status, Status::Warn);
  EXPECT_EQ(warn.value, "1.5 GiB free");
  EXPECT_EQ(warn.threshold, ">= 2 x 1 GiB");
  EXPECT_TRUE(contains(warn.detail, "room for 1.5 snapshot(s) of 1 GiB"));
  EXPECT_EQ(grade_free_space(gib / 2, gib).status, Status::Fail);
  TempDir dir;
  EXPECT_EQ(check_free_space(dir.path(), 1).status, Status::Ok);
  EXPECT_EQ(check_free_space(dir / "nope", 1).status, Status::Fail);
}

TEST(StorageDevice, TmpfsIsNodeLocalMemory) {
  const CheckResult shm = check_storage_device("/dev/shm");
  EXPECT_EQ(shm.status, Status::Warn);
  EXPECT_EQ(shm.value, "tmpfs");
  EXPECT_TRUE(contains(shm.detail, "lost at reboot"));
  EXPECT_EQ(check_storage_device("/nonexistent-dir").status, Status::Fail);
}

TEST(StorageDevice, LocalDiskIsNamedWithItsKind) {
  TempDir dir;  // /tmp: a local disk here, whichever kind
  const CheckResult disk = check_storage_device(dir.path());
  EXPECT_NE(disk.status, Status::Fail);
  EXPECT_TRUE(contains(disk.value, "(ssd)") || contains(disk.value, "(hdd)") || disk.value == "tmpfs" ||
              contains(disk.detail, "no local block device"))
      << disk.value;
}

TEST(WriteBandwidth, WritesWhatItReportsAndLeavesNothingBehind) {
  TempDir dir;
  const WriteMeasurement measured = measure_write(dir.path(), 8u << 20, std::chrono::seconds(30));
  EXPECT_EQ(measured.bytes, 8u << 20);
  EXPECT_GT(measured.seconds, 0);
  EXPECT_EQ(entries_in(dir.path()), 0u);
  EXPECT_THROW(measure_write(dir / "nope", 1, std::chrono::seconds(1)), Error);
}

TEST(WriteBandwidth, StopsAtItsTimeBudget) {
  TempDir dir;
  const WriteMeasurement measured = measure_write(dir.path(), 1ull << 40, std::chrono::milliseconds(0));
  EXPECT_LT(measured.bytes, 1ull << 40);
}

TEST(WriteBandwidth, GradedAgainstTheMinimum) {
  const CheckResult slow = grade_write_bandwidth({100'000'000, 1.0}, 200);
  EXPECT_EQ(slow.status, Status::Warn);
  EXPECT_EQ(slow.value, "100.0 MB/s");
  EXPECT_EQ(slow.threshold, ">= 200 MB/s");
  EXPECT_EQ(grade_write_bandwidth({400'000'000, 1.0}, 200).status, Status::Ok);
}

}  // namespace
}  // namespace ddp::doctor
