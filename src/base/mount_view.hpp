#pragma once
// Which file systems a process sees, to tell the node's from a container's. A container plugin listed before
// ddp.so in plugstack.conf (pyxis) moves each task into its container's mount namespace before ddp.so's task_init:
// ddp.so then prepares the snapshot directory in the container's view, as the program will see it. There a
// missing directory must not be created on the container's own file systems (its image, or the tmpfs enroot
// mounts on /tmp), where the snapshots would vanish with the container: the nearest directory that exists must lie
// on a file system the node has mounted too, brought in by a mount of its own.
#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ddp {

struct MountEntry {
  std::string mount_point;  // unescaped (mountinfo writes spaces as \040)
  dev_t device = 0;
};

// The lines of /proc/PID/mountinfo, in order (a later entry at the same point is mounted over an earlier one).
// Lines that do not parse are skipped.
std::vector<MountEntry> parse_mountinfo(std::string_view text);

// The entry that holds the absolute, canonical `path`: the last one listed with the longest mount point that is
// `path` itself or a directory above it. Null when `mounts` holds no "/".
const MountEntry* mount_holding(const std::vector<MountEntry>& mounts, const std::string& path);

struct MountView {
  ino_t namespace_id = 0;      // /proc/self/ns/mnt's inode: equal ids, one view
  std::vector<dev_t> devices;  // of every mount
  std::vector<MountEntry> mounts;
};

// This process's view (/proc/self/ns/mnt, /proc/self/mountinfo). Throws ddp::Error when /proc cannot be read.
MountView this_mount_view();

// This process's mount namespace id; 0 when /proc cannot tell.
ino_t this_mount_namespace();

// In a container's view `here` (mounts of a namespace other than the node's): throws ddp::Error when the
// nearest existing directory of `path` (absolute) lies on the container's root file system or on a file system
// the node's view `node_devices` does not have. `what` names the path ("snapshot directory"), `mount_option` the
// container's option that mounts a node directory.
void require_node_file_system(const std::string& path, const std::string& what, const std::vector<dev_t>& node_devices,
                              const std::vector<MountEntry>& here, const std::string& mount_option);

}  // namespace ddp
