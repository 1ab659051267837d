// A container's view of the file system against the node's: mountinfo as the kernel writes it, the mount that holds
// a path, and the rule that keeps a snapshot directory off the container's own file systems.
#include "base/mount_view.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "core/error.hpp"
#include "test_common.hpp"

namespace ddp {
namespace {

// A node (root on 254:0, /tmp a tmpfs 0:44), and an enroot-like container on it: its image on 254:0 at /, its own
// tmpfs on /tmp (0:90), and the node's /fsx (0:51) brought in with a mount of its own.
constexpr const char* kContainer =
    "51 119 254:0 /var/lib/enroot/data/img / rw,relatime - ext4 /dev/vda rw\n"
    "52 51 0:90 / /tmp rw,nosuid,nodev - tmpfs tmpfs rw\n"
    "53 51 0:51 /users /fsx/with\\040space rw - lustre 10.0.0.1@tcp:/fsx rw\n"
    "54 51 0:51 /users /fsx rw - lustre 10.0.0.1@tcp:/fsx rw\n"
    "not a mountinfo line\n";

const std::vector<dev_t> kNodeDevices = {makedev(254, 0), makedev(0, 44), makedev(0, 51)};

TEST(Mountinfo, ReadsMountPointsAndDevices) {
  const std::vector<MountEntry> mounts = parse_mountinfo(kContainer);
  ASSERT_EQ(4u, mounts.size());
  EXPECT_EQ("/", mounts[0].mount_point);
  EXPECT_EQ(makedev(254, 0), mounts[0].device);
  EXPECT_EQ("/fsx/with space", mounts[2].mount_point);
  EXPECT_EQ(makedev(0, 51), mounts[3].device);
}

TEST(Mountinfo, FindsTheMountThatHoldsAPath) {
  const std::vector<MountEntry> mounts = parse_mountinfo(kContainer);
  EXPECT_EQ("/fsx", mount_holding(mounts, "/fsx/alice/run")->mount_point);
  EXPECT_EQ("/fsx", mount_holding(mounts, "/fsx")->mount_point);
  EXPECT_EQ("/", mount_holding(mounts, "/fsxother")->mount_point);
  EXPECT_EQ("/tmp", mount_holding(mounts, "/tmp/x")->mount_point);
  EXPECT_EQ(nullptr, mount_holding({}, "/x"));
}

// Empty when accepted.
std::string refusal(const std::string& path, const std::vector<MountEntry>& here) {
  return ddp::testing::error_of<Error>([&] {
    require_node_file_system(path, "snapshot directory", kNodeDevices, here, "srun --container-mounts=SRC:DST");
  });
}

TEST(ContainerView, RefusesTheContainersOwnFileSystems) {
  const std::vector<MountEntry> mounts = parse_mountinfo(kContainer);
  // These paths exist on this machine, so the nearest existing part is the path itself.
  std::string message = refusal("/", mounts);
  EXPECT_NE(std::string::npos, message.find("lies on the container's own root file system")) << message;
  EXPECT_NE(std::string::npos, message.find("srun --container-mounts=SRC:DST")) << message;
  message = refusal("/tmp", mounts);
  EXPECT_NE(std::string::npos, message.find("on '/tmp', a file system the container made for itself")) << message;
}

TEST(ContainerView, NamesTheNearestPartThatExists) {
  const std::string message = refusal("/tmp/ddp-no-such-dir/a/b", parse_mountinfo(kContainer));
  EXPECT_NE(std::string::npos, message.find("'/tmp' (the nearest part of it that exists)")) << message;
}

TEST(ContainerView, AcceptsANodeFileSystemMountedIn) {
  // This machine's own /tmp, seen as a mount of a node device.
  struct stat info = {};
  ASSERT_EQ(0, stat("/tmp", &info));
  const std::vector<MountEntry> mounts = {{"/", makedev(254, 0)}, {"/tmp", info.st_dev}};
  const std::vector<dev_t> node = {makedev(254, 0), info.st_dev};
  EXPECT_NO_THROW(require_node_file_system("/tmp/ddp-no-such-dir/snapshots", "snapshot directory", node, mounts, "x"));
}

TEST(ContainerView, ThisProcessHasAView) {
  const MountView view = this_mount_view();
  EXPECT_NE(0u, view.namespace_id);
  EXPECT_EQ(view.namespace_id, this_mount_namespace());
  EXPECT_NE(nullptr, mount_holding(view.mounts, "/"));
  EXPECT_EQ(view.mounts.size(), view.devices.size());
}

}  // namespace
}  // namespace ddp
