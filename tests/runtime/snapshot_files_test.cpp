// Snapshot files on disk: names with the run identity, the directory rules the
// runtime shares with the plugin, reading only regular files whose zip directory accounts for their size,
// temporaries that are unique and never removed under a live writer, and the start-up probe.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <thread>

#include "core/error.hpp"
#include "core/netif.hpp"
#include "ddp_runtime/options/cli.hpp"
#include "ddp_runtime/snapshots/snapshot_files.hpp"
#include "test_common.hpp"
#include "test_support.hpp"

namespace ddp::runtime {
namespace {

using ddp::runtime::testing::listing;
using ddp::testing::error_of;

namespace fs = std::filesystem;

unsigned mode_of(const std::string& path) {
  struct stat info = {};
  EXPECT_EQ(lstat(path.c_str(), &info), 0) << path;
  return info.st_mode & 07777;
}

// --- a stored zip archive, the layout torch.save writes --------------------------------------------------------

void put(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out += static_cast<char>((value >> (8 * i)) & 0xff);
}

struct ZipBuild {
  std::string bytes;
  std::size_t directory_offset = 0;
};

ZipBuild stored_zip(const std::vector<std::pair<std::string, std::string>>& records) {
  ZipBuild zip;
  std::string directory;
  for (const auto& [name, data] : records) {
    const std::size_t local = zip.bytes.size();
    put(zip.bytes, 0x04034b50, 4);
    put(zip.bytes, 20, 2);
    put(zip.bytes, 0, 2);
    put(zip.bytes, 0, 2);  // stored
    put(zip.bytes, 0, 4);
    put(zip.bytes, 0, 4);  // crc (not checked here)
    put(zip.bytes, data.size(), 4);
    put(zip.bytes, data.size(), 4);
    put(zip.bytes, name.size(), 2);
    put(zip.bytes, 0, 2);
    zip.bytes += name + data;
    put(directory, 0x02014b50, 4);
    put(directory, 20, 2);
    put(directory, 20, 2);
    put(directory, 0, 2);
    put(directory, 0, 2);
    put(directory, 0, 4);
    put(directory, 0, 4);
    put(directory, data.size(), 4);
    put(directory, data.size(), 4);
    put(directory, name.size(), 2);
    put(directory, 0, 2);
    put(directory, 0, 2);
    put(directory, 0, 2);
    put(directory, 0, 2);
    put(directory, 0, 4);
    put(directory, local, 4);
    directory += name;
  }
  zip.directory_offset = zip.bytes.size();
  zip.bytes += directory;
  put(zip.bytes, 0x06054b50, 4);
  put(zip.bytes, 0, 4);
  put(zip.bytes, records.size(), 2);
  put(zip.bytes, records.size(), 2);
  put(zip.bytes, directory.size(), 4);
  put(zip.bytes, zip.directory_offset, 4);
  put(zip.bytes, 0, 2);
  return zip;
}

std::vector<ZipRecord> records_of(const std::string& bytes) {
  return read_zip_directory(bytes.size(), [&](uint64_t offset, void* buffer, std::size_t n) {
    if (offset > bytes.size() || n > bytes.size() - offset) throw SnapshotCorrupt("read past the end");
    std::memcpy(buffer, bytes.data() + offset, n);
  });
}

TEST(SnapshotNames, CarryTheRunAndParseBackOnlyWhenExact) {
  const SnapshotName name{"4711", 10, 320};
  EXPECT_EQ(snapshot_file_name(name), "snapshot-e000010-s000000000320-r4711.pt");
  const auto parsed = parse_snapshot_file_name("snapshot-e000010-s000000000320-rresnet-a.2.pt");
  ASSERT_TRUE(parsed);
  EXPECT_EQ(parsed->run_id, "resnet-a.2");
  EXPECT_EQ(parsed->global_step, 320);
  for (const char* other :
       {"snapshot-e000010-s000000000320.pt", "snapshot-e10-s320-r4711.pt", "snapshot-e000010-s000000000320-r.pt",
        "snapshot-e000010-s000000000320-r4711.pt.corrupt", "snapshot-e000010-s000000000320-r.x.pt",
        "snapshot-e-00010-s000000000320-r4711.pt", "snapshot-e000010-s000000000320-ra/b.pt"}) {
    EXPECT_FALSE(parse_snapshot_file_name(other)) << other;
  }
  EXPECT_TRUE(is_valid_run_id("1234"));
  EXPECT_FALSE(is_valid_run_id(""));
  EXPECT_FALSE(is_valid_run_id(".hidden"));
  EXPECT_FALSE(is_valid_run_id("a b"));
  EXPECT_FALSE(is_valid_run_id(std::string(65, 'a')));
}

TEST(SnapshotNames, TheRunIsTheOptionElseTheSlurmJobAndItsInstanceElseTorchrunsElseDefault) {
  const auto run_of = [](std::vector<std::string> args, std::map<std::string, std::string> vars) {
    args.insert(args.end(), {"5", "1"});
    return parse_train_args(args,
                            [vars](const std::string& name) -> std::optional<std::string> {
                              const auto found = vars.find(name);
                              if (found == vars.end()) return std::nullopt;
                              return found->second;
                            })
        .options.run_id;
  };
  EXPECT_EQ(run_of({"--run-id", "mine"}, {{"SLURM_JOB_ID", "4711"}}), "mine");
  EXPECT_EQ(run_of({}, {{"SLURM_JOB_ID", "4711"}, {"TORCHELASTIC_RUN_ID", "4711.3"}}), "4711");
  // The job's instance (srun --ddp's DDP_JOB_INSTANCE) sets the job apart from another with the same id; a malformed
  // one is ignored.
  EXPECT_EQ(run_of({}, {{"SLURM_JOB_ID", "4711"}, {"DDP_JOB_INSTANCE", "0a1b2c3d4e5f"}}), "4711-0a1b2c3d4e5f");
  EXPECT_EQ(run_of({}, {{"SLURM_JOB_ID", "4711"}, {"DDP_JOB_INSTANCE", "../../x"}}), "4711");
  EXPECT_EQ(run_of({"--run-id", "mine"}, {{"SLURM_JOB_ID", "4711"}, {"DDP_JOB_INSTANCE", "0a1b2c3d4e5f"}}), "mine");
  EXPECT_EQ(run_of({}, {{"TORCHELASTIC_RUN_ID", "rdzv1"}}), "rdzv1");
  EXPECT_EQ(run_of({}, {}), "default");
  const std::string refusal = error_of([&] { run_of({"--run-id", "../x"}, {}); });
  EXPECT_NE(refusal.find("--run-id '../x' is not a run id"), std::string::npos) << refusal;
}

TEST(ZipDirectory, ListsTheRecordsOfAWholeArchive) {
  const ZipBuild zip = stored_zip({{"archive/data.pkl", "pickle"}, {"archive/data/0", std::string(100, 'x')}});
  const std::vector<ZipRecord> records = records_of(zip.bytes);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[1].name, "archive/data/0");
  EXPECT_EQ(records[1].size, 100u);
  EXPECT_EQ(zip.bytes.substr(records[1].offset, 100), std::string(100, 'x'));
}

TEST(ZipDirectory, RefusesArchivesWhoseDirectoryTheFileDoesNotHold) {
  const ZipBuild zip = stored_zip({{"a", "1234"}, {"b", std::string(64, 'y')}});
  const auto refused = [](const std::string& bytes) {
    return ddp::testing::error_of<SnapshotCorrupt>([&] { records_of(bytes); });
  };
  EXPECT_NE(refused(zip.bytes.substr(0, zip.bytes.size() - 5)).find("no zip directory"), std::string::npos);
  EXPECT_NE(refused(zip.bytes.substr(zip.bytes.size() / 2)).find("is not a whole snapshot"), std::string::npos);
  EXPECT_NE(refused(std::string(16, '\0')).find("too short"), std::string::npos);
  // A record that claims 1 GiB of data in a small file: what a reader would have allocated.
  std::string huge = zip.bytes;
  const std::size_t entry = zip.directory_offset + 46 + 1;  // the second directory entry
  huge.replace(entry + 20, 4, std::string("\0\0\0\x40", 4));
  huge.replace(entry + 24, 4, std::string("\0\0\0\x40", 4));
  EXPECT_NE(refused(huge).find("runs past the data"), std::string::npos) << refused(huge);
  // Two directory entries that point at the same record.
  std::string overlapping = zip.bytes;
  overlapping.replace(entry + 42, 4, std::string("\0\0\0\0", 4));
  overlapping.replace(entry + 24, 4, std::string("\x04\0\0\0", 4));
  overlapping.replace(entry + 20, 4, std::string("\x04\0\0\0", 4));
  EXPECT_NE(refused(overlapping).find("overlap"), std::string::npos) << refused(overlapping);
  // A directory entry count no directory could hold.
  std::string many = zip.bytes;
  many.replace(many.size() - 12, 2, std::string("\xff\x7f", 2));
  EXPECT_NE(refused(many).find("too many records"), std::string::npos) << refused(many);
}

TEST(SnapshotFile, RefusesAFifoALinkToDevZeroAndATruncatedFileAtOnce) {
  const std::string dir = testing::make_temp_dir();
  ASSERT_EQ(mkfifo((dir + "/fifo").c_str(), 0600), 0);
  ASSERT_EQ(symlink("/dev/zero", (dir + "/zero").c_str()), 0);
  testing::write_bytes(dir + "/cut", stored_zip({{"a", std::string(1000, 'z')}}).bytes.substr(0, 600));
  testing::write_bytes(dir + "/whole", stored_zip({{"a", std::string(1000, 'z')}}).bytes);
  // Each would have hung (FIFO) or filled memory (/dev/zero) when read whole.
  EXPECT_NE(error_of([&] { SnapshotFile::open(dir + "/fifo"); }).find("is not a regular file"), std::string::npos);
  EXPECT_NE(error_of([&] { SnapshotFile::open(dir + "/zero"); }).find("is not a regular file"), std::string::npos);
  EXPECT_NE(error_of([&] { SnapshotFile::open("/dev/zero"); }).find("is not a regular file"), std::string::npos);
  EXPECT_NE(error_of([&] { SnapshotFile::open(dir + "/cut"); }).find(dir + "/cut is not a whole snapshot"),
            std::string::npos);
  EXPECT_EQ(SnapshotFile::open(dir + "/whole").size(), fs::file_size(dir + "/whole"));
  // In the snapshot directory a link is refused even when it points at a good file.
  ASSERT_EQ(symlink((dir + "/whole").c_str(), (dir + "/link").c_str()), 0);
  const int dir_fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  EXPECT_NE(error_of([&] { SnapshotFile::open_in(dir_fd, dir, "link"); }).find("is a symbolic link"),
            std::string::npos);
  EXPECT_NE(error_of([&] { SnapshotFile::open_in(dir_fd, dir, "fifo"); }).find("is not a regular file"),
            std::string::npos);
  close(dir_fd);
}

TEST(AtomicFile, AppearsOnlyOnCommitPrivatelyAndTwoWritersOfOneNameNeverMix) {
  const std::string dir = testing::make_temp_dir();
  {
    AtomicFile abandoned(dir + "/a.pt");
    abandoned.write("half", 4);
  }
  EXPECT_EQ(listing(dir), std::vector<std::string>{});
  // Two writers of one name in one process (one PID): each has a temporary of its own.
  AtomicFile first(dir + "/b.pt");
  AtomicFile second(dir + "/b.pt");
  first.write("first-whole", 11);
  second.write("second", 6);
  EXPECT_EQ(listing(dir).size(), 2u);
  EXPECT_NE(access((dir + "/b.pt").c_str(), F_OK), 0);
  second.commit();
  EXPECT_EQ(testing::read_text(dir + "/b.pt"), "second");
  first.commit();
  EXPECT_EQ(testing::read_text(dir + "/b.pt"), "first-whole");
  EXPECT_EQ(listing(dir), std::vector<std::string>{"b.pt"});
  EXPECT_EQ(mode_of(dir + "/b.pt"), 0600u);
}

TEST(AtomicFile, NeverWritesThroughALinkPlantedAtItsName) {
  const std::string dir = testing::make_temp_dir();
  testing::write_bytes(dir + "/victim", "keep me");
  ASSERT_EQ(symlink((dir + "/victim").c_str(), (dir + "/model.pt").c_str()), 0);
  AtomicFile file(dir + "/model.pt");
  file.write("new", 3);
  file.commit();
  EXPECT_EQ(testing::read_text(dir + "/victim"), "keep me");
  EXPECT_EQ(testing::read_text(dir + "/model.pt"), "new");
  EXPECT_FALSE(fs::is_symlink(dir + "/model.pt"));
}

TEST(SnapshotFilesDir, ProbesLeavingNothingAndFollowsTheDirectoryRules) {
  const std::string dir = testing::make_temp_dir();
  SnapshotFiles files(dir + "/new/nested", "7");
  EXPECT_EQ(listing(dir + "/new/nested"), std::vector<std::string>{});
  EXPECT_EQ(mode_of(dir + "/new"), 0700u);
  EXPECT_EQ(mode_of(dir + "/new/nested"), 0700u);
  testing::write_bytes(dir + "/file", "a file, not a directory");
  const std::string message = error_of([&] { SnapshotFiles(dir + "/file/snaps", "7"); });
  EXPECT_NE(message.find(dir + "/file"), std::string::npos) << message;
  EXPECT_NE(message.find("--snapshot-dir"), std::string::npos) << message;
  ASSERT_EQ(chmod((dir + "/new/nested").c_str(), 0777), 0);
  EXPECT_NE(error_of([&] { SnapshotFiles(dir + "/new/nested", "7"); }).find("is writable by others (mode 0777)"),
            std::string::npos);
  ASSERT_EQ(symlink((dir + "/new").c_str(), (dir + "/link").c_str()), 0);
  EXPECT_NE(error_of([&] { SnapshotFiles(dir + "/link", "7"); }).find("is a symbolic link"), std::string::npos);
}

// A second process of the same run starting while the first still writes (two steps of one job in one directory)
// must not delete the first one's temporary; a temporary nobody holds is a killed writer's and goes.
TEST(SnapshotFilesDir, RemovesStaleTemporariesOfItsRunButNeverOneALiveWriterHolds) {
  const std::string dir = testing::make_temp_dir();
  SnapshotFiles writer(dir, "7");
  AtomicFile live = writer.create({"7", 1, 10});
  live.write("in progress", 11);
  const std::string stale = "." + snapshot_file_name({"7", 0, 5}) + ".tmp-" + host_name() + "-0123456789abcdef";
  const std::string other_run = "." + snapshot_file_name({"8", 0, 5}) + ".tmp-" + host_name() + "-0123456789abcdef";
  testing::write_bytes(dir + "/" + stale, "killed mid-write");
  testing::write_bytes(dir + "/" + other_run, "another run's");
  SnapshotFiles starting(dir, "7");
  const std::vector<std::string> names = listing(dir);
  EXPECT_EQ(std::count(names.begin(), names.end(), stale), 0) << "the killed writer's temporary is removed";
  EXPECT_EQ(std::count(names.begin(), names.end(), other_run), 1) << "another run's is left alone";
  EXPECT_EQ(names.size(), 2u) << "the live writer's temporary is still there";
  live.commit();
  EXPECT_EQ(testing::read_text(writer.path_of({"7", 1, 10})), "in progress");
}

// Where locks are node-local (Lustre's localflock, NFS's local_lock=flock) a lock taken here says nothing of a writer
// on another node: a temporary of another node's writer, or of one that did not say where it ran (an older
// ddp-train's name), is removed only once nobody has changed it for an hour; this node's unlocked one at once.
TEST(SnapshotFilesDir, AnotherNodesTemporaryIsRemovedOnlyOnceAbandonedForAnHour) {
  const std::string dir = testing::make_temp_dir();
  const std::string name = "." + snapshot_file_name({"7", 0, 5});
  const std::string this_node = name + ".tmp-" + host_name() + "-0123456789abcdef";
  const std::string written_now = name + ".tmp-node2-0123456789abcdef";
  const std::string abandoned = name + ".tmp-node3-0123456789abcdef";
  const std::string older_form = name + ".tmp-0123456789abcdef0123456789abcdef";
  const std::string older_form_abandoned = name + ".tmp-fedcba9876543210fedcba9876543210";
  for (const std::string& file : {this_node, written_now, abandoned, older_form, older_form_abandoned}) {
    testing::write_bytes(dir + "/" + file, "x");
  }
  const timespec two_hours_ago[2] = {{time(nullptr) - 7200, 0}, {time(nullptr) - 7200, 0}};
  for (const std::string& file : {abandoned, older_form_abandoned}) {
    ASSERT_EQ(utimensat(AT_FDCWD, (dir + "/" + file).c_str(), two_hours_ago, 0), 0) << file;
  }
  SnapshotFiles starting(dir, "7");
  const std::vector<std::string> names = listing(dir);
  EXPECT_EQ(names, (std::vector<std::string>{older_form, written_now})) << "left: another node's writer may be alive";
}

TEST(SnapshotFilesDir, ListsThisRunsFilesNewestFirstAndSetsCorruptOnesAside) {
  const std::string dir = testing::make_temp_dir();
  SnapshotFiles files(dir, "7");
  for (const SnapshotName& name :
       {SnapshotName{"7", 2, 64}, SnapshotName{"7", 10, 320}, SnapshotName{"8", 50, 9999}, SnapshotName{"7", 5, 160}}) {
    testing::write_bytes(files.path_of(name), "x");
  }
  testing::write_bytes(dir + "/snapshot.pt", "not a ddp-train name");
  const std::vector<SnapshotName> ours = files.this_runs();
  ASSERT_EQ(ours.size(), 3u);
  EXPECT_EQ(ours[0].global_step, 320);
  EXPECT_EQ(ours[2].global_step, 64);
  EXPECT_EQ(files.other_runs(), std::vector<std::string>{"8"});
  EXPECT_EQ(files.set_aside(ours[0]), files.path_of(ours[0]) + ".corrupt");
  EXPECT_EQ(files.this_runs().size(), 2u);
  files.remove(ours[2]);
  EXPECT_EQ(files.this_runs().size(), 1u);
}

}  // namespace
}  // namespace ddp::runtime
