#pragma once
// The snapshot directory: where it is (--ddp-snapshot-dir, or the admin's snapshot_dir default, with %u, %j and %x
// expanded) and the rules it must follow, in one place for the plugin and the runtime.
//
// Snapshots hold the user's weights on storage other users can reach, and a run resumes from what it finds there,
// so the directory must be the user's alone:
//   - it is walked component by component with openat from "/" (or from the working directory for a relative
//     path); missing components are created mode 0700 by the calling user and opened with O_NOFOLLOW;
//   - the last component is a directory itself, not a symbolic link, owned by the calling user (effective uid)
//     and writable by nobody else (no group or other write bit);
//   - every existing component above it is owned by root or by the user, and one that its group or everyone may
//     write has the sticky bit (as /tmp): else its owner, or anyone who may write it, could move the directory
//     away and put their own in its place. In a user namespace every owner it does not map shows the kernel's
//     overflow uid (65534), the node's root too in rootless containers (ch-run, Apptainer without setuid, enroot):
//     where that uid is not itself mapped it counts as root, since no process inside can tell root from the others;
//     ddp.so has checked the same path in the node's view (or, after pyxis, the container's).
// The runtime then reaches the files inside through the directory's descriptor (openat), never by path again,
// so a component renamed or replaced after the check does not redirect a running job. The same rules hold for
// the step's log directory (step_logs.hpp), where PyTorch writes error reports by path.
#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "base/unique_fd.hpp"

namespace ddp {

struct PathVars {
  std::string user;  // empty when the job's uid has no name on this node
  std::string job_id;
  std::string job_name;
};

// Throws ddp::Error for an unknown %-sequence, a relative result, a value that would leave the admin's directory
// (a job name with '/', or "." / ".."), or %u when the user has no name.
std::string expand_path_template(const std::string& path_template, const PathVars& vars);

// What a directory under these rules is called in errors, and what is asked of it.
struct DirRules {
  std::string noun = "snapshot directory";          // "snapshot directory 'P' is owned by uid ..."
  std::string contents = "snapshots";               // "...: its owner could read, replace or delete your snapshots"
  std::string fix = "use a directory of your own";  // ends every refusal: "...; use a directory of your own"
  bool create = true;                               // create what is missing and require write access;
                                                    // false: read access, and a missing path is no error
  std::optional<uid_t> owner;                       // whose it must be; unset: the caller's (effective uid)
  mode_t mode = 0700;                               // of what is created
};

// Opens `path` under the rules above. Throws ddp::Error naming the path, what is wrong and the fix. Without
// `create`, a path that does not exist gives an empty UniqueFd.
UniqueFd open_private_dir(const std::string& path, const DirRules& rules);

// `name` inside `parent`, a directory opened under the rules (`parent_path` names it in errors): the same rules
// for the last component, created mode 0700 when missing and `create` is set.
UniqueFd open_private_subdir(int parent, const std::string& parent_path, const std::string& name,
                             const DirRules& rules);

class SnapshotDir {
 public:
  // Opens `path` under the rules above, creating what is missing, as the calling user (never call it as root on
  // a user's behalf). Throws ddp::Error naming the path, what is wrong and the fix; `option` is the option that
  // chose the directory (e.g. "--snapshot-dir"), named in the fix.
  static SnapshotDir open(const std::string& path, const std::string& option);

  int fd() const { return fd_.get(); }
  const std::string& path() const { return path_; }

 private:
  SnapshotDir(std::string path, UniqueFd fd) : path_(std::move(path)), fd_(std::move(fd)) {}
  std::string path_;
  UniqueFd fd_;
};

// A task that runs in a container's view of the file system (ddp.so listed after a container plugin): the
// devices of the node's own view, and the container's option that mounts a node directory (mount_view.hpp).
struct ContainerView {
  std::vector<dev_t> node_devices;
  std::string mount_option;
};

// SnapshotDir::open in a child process that must answer within `deadline`: on a file system that hangs (NFS,
// Lustre), the caller gets ddp::Error at the deadline instead of hanging with it; the child is killed. For the
// plugin's tasks, before exec (nothing touches shared storage inside slurmstepd itself). With `container`, the
// directory is first required to reach the node (require_node_file_system): nothing is created on the
// container's own file systems.
void prepare_snapshot_dir(const std::string& path, const std::string& option, std::chrono::milliseconds deadline,
                          const ContainerView* container = nullptr);

}  // namespace ddp
