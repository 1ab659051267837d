#include "core/snapshot_dir.hpp"

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <vector>

#include "core/error.hpp"
#include "spank_plugin/step/task_env.hpp"
#include "test_common.hpp"

namespace ddp {
namespace {

using ddp::testing::error_of;

namespace fs = std::filesystem;
const PathVars kVars{"alice", "4711", "resnet"};

class SnapshotDirTest : public ::testing::Test {
 protected:
  testing::TempDir dir_;
  const std::string root_ = dir_.path();
};

TEST(SnapshotDirTemplate, ExpandsUserJobAndName) {
  EXPECT_EQ(expand_path_template("/fsx/%u/%x-%j", kVars), "/fsx/alice/resnet-4711");
  EXPECT_EQ(expand_path_template("/shared/100%%/%j", kVars), "/shared/100%/4711");
}

TEST(SnapshotDirTemplate, RejectsWhatWouldEscapeOrIsUnknown) {
  EXPECT_EQ(error_of([] { expand_path_template("/fsx/%q", kVars); }),
            "snapshot directory '/fsx/%q': unknown %-sequence '%q'; use %u (user), %j (job id), %x (job name) or %%");
  const std::string escaping = error_of([] { expand_path_template("/fsx/%x", {"alice", "1", "../../etc"}); });
  EXPECT_NE(escaping.find("job name '../../etc'"), std::string::npos);
  EXPECT_NE(error_of([] { expand_path_template("/fsx/%x", {"alice", "1", ".."}); }), "");
  EXPECT_NE(error_of([] { expand_path_template("/fsx/%x", {"alice", "1", ""}); }), "");
  EXPECT_NE(error_of([] { expand_path_template("snapshots/%j", kVars); }).find("not an absolute path"),
            std::string::npos);
  EXPECT_NE(error_of([] { expand_path_template("/fsx/%", kVars); }), "");
}

constexpr auto kDeadline = std::chrono::seconds(10);
const std::string kOption = "--ddp-snapshot-dir";

unsigned mode_of(const std::string& path) {
  struct stat info = {};
  EXPECT_EQ(lstat(path.c_str(), &info), 0) << path;
  return info.st_mode & 07777;
}

TEST(SnapshotDirTemplate, RefusesUserWithoutANameInsteadOfUsingTheUid) {
  const std::string refusal = error_of([] { expand_path_template("/fsx/%u/%j", {"", "1", "x"}); });
  EXPECT_NE(refusal.find("has no name on this node"), std::string::npos) << refusal;
  EXPECT_EQ(expand_path_template("/fsx/%j", {"", "1", "x"}), "/fsx/1");
}

TEST_F(SnapshotDirTest, CreatesMissingParentsPrivately) {
  const std::string dir = root_ + "/alice/job-1/snapshots";
  prepare_snapshot_dir(dir, kOption, kDeadline);
  for (const std::string& created : {root_ + "/alice", root_ + "/alice/job-1", dir}) {
    EXPECT_EQ(mode_of(created), 0700u) << created;
  }
  prepare_snapshot_dir(dir, kOption, kDeadline);  // a requeued job finds it again
  const SnapshotDir opened = SnapshotDir::open(dir, kOption);
  EXPECT_GE(opened.fd(), 0);
  EXPECT_EQ(opened.path(), dir);
}

TEST_F(SnapshotDirTest, AFileIsNotADirectory) {
  const std::string file = root_ + "/file";
  std::FILE* created = std::fopen(file.c_str(), "w");
  ASSERT_NE(created, nullptr) << file;
  std::fclose(created);
  EXPECT_NE(error_of([&] { prepare_snapshot_dir(file, kOption, kDeadline); }).find("is not a directory"),
            std::string::npos);
  EXPECT_NE(error_of([&] { prepare_snapshot_dir(file + "/below", kOption, kDeadline); }).find("is not a directory"),
            std::string::npos);
}

// Log injection: the plugin logs these errors to slurmd's log (slurm_error, one line per failure). A path the user
// chose with a line break or a terminal escape in it must come out quoted, one line, with those bytes as '?'.
TEST_F(SnapshotDirTest, APathWithControlCharactersIsLoggedQuotedOnOneLine) {
  const std::string hostile = root_ + "/evil\n[ddp] forged line\x1b[2J";
  std::FILE* created = std::fopen(hostile.c_str(), "w");
  ASSERT_NE(created, nullptr);
  std::fclose(created);
  const std::string message = error_of([&] { prepare_snapshot_dir(hostile + "/below", kOption, kDeadline); });
  EXPECT_EQ(message.find_first_of("\n\r\x1b"), std::string::npos) << message;
  EXPECT_NE(message.find("snapshot directory '" + root_ + "/evil?[ddp] forged line?[2J/below'"), std::string::npos)
      << message;
  const std::string expanded = error_of([] { expand_path_template("/fsx/%x", {"alice", "1", "a/\nb\x1b"}); });
  EXPECT_EQ(expanded.find_first_of("\n\x1b"), std::string::npos) << expanded;
  EXPECT_NE(expanded.find("the job name 'a/?b?'"), std::string::npos) << expanded;
}

TEST_F(SnapshotDirTest, RefusesALinkAsTheLastComponentButFollowsOneAbove) {
  ASSERT_EQ(mkdir((root_ + "/real").c_str(), 0700), 0);
  ASSERT_EQ(symlink((root_ + "/real").c_str(), (root_ + "/link").c_str()), 0);
  EXPECT_EQ(error_of([&] { SnapshotDir::open(root_ + "/link", kOption); }),
            "snapshot directory '" + root_ +
                "/link' is a symbolic link; give the directory it points to; use a "
                "directory of your own (--ddp-snapshot-dir)");
  EXPECT_EQ(error_of([&] { SnapshotDir::open(root_ + "/link/below", kOption); }), "");
  EXPECT_EQ(mode_of(root_ + "/real/below"), 0700u);
}

TEST_F(SnapshotDirTest, RefusesADirectoryOthersMayWrite) {
  ASSERT_EQ(mkdir((root_ + "/open").c_str(), 0700), 0);
  ASSERT_EQ(chmod((root_ + "/open").c_str(), 0777), 0);
  EXPECT_NE(error_of([&] { SnapshotDir::open(root_ + "/open", kOption); }).find("is writable by others (mode 0777)"),
            std::string::npos);
  ASSERT_EQ(chmod((root_ + "/open").c_str(), 0775), 0);
  EXPECT_NE(error_of([&] { SnapshotDir::open(root_ + "/open", kOption); }).find("chmod go-w"), std::string::npos);
  ASSERT_EQ(chmod((root_ + "/open").c_str(), 0755), 0);
  EXPECT_EQ(error_of([&] { SnapshotDir::open(root_ + "/open", kOption); }), "");
}

// Runs `body` as uid/gid `user` in a child process; the child's exit status says whether it held.
int as_user(uid_t user, const std::function<bool()>& body) {
  const pid_t child = fork();
  if (child == 0) {
    if (setresgid(user, user, user) != 0 || setresuid(user, user, user) != 0) _exit(3);
    _exit(body() ? 0 : 1);
  }
  int status = 0;
  waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

constexpr uid_t kVictim = 65534;    // nobody
constexpr uid_t kAttacker = 65533;  // any other uid

// A planted snapshot directory: with an admin template such as /scratch/ddp-%j, another user pre-creates the next job's
// directory 0777 and then reads the weights, deletes snapshots or plants one. The victim's step must refuse it.
TEST_F(SnapshotDirTest, ADirectoryAnotherUserMadeIsRefusedWithOneLine) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to act as two users";
  ASSERT_EQ(chmod(root_.c_str(), 01777), 0);  // a shared scratch directory, sticky like /tmp
  const std::string planted = root_ + "/ddp-4711";
  ASSERT_EQ(mkdir(planted.c_str(), 0777), 0);
  ASSERT_EQ(chown(planted.c_str(), kAttacker, kAttacker), 0);
  ASSERT_EQ(chmod(planted.c_str(), 0777), 0);
  // The attacker's parent for a %u/%j template: everyone may write it, no sticky bit.
  const std::string parent = root_ + "/victim";
  ASSERT_EQ(mkdir(parent.c_str(), 0777), 0);
  ASSERT_EQ(chown(parent.c_str(), kAttacker, kAttacker), 0);
  ASSERT_EQ(chmod(parent.c_str(), 0777), 0);
  // And a link named like the victim's next directory, pointing at a directory of the victim's.
  const std::string own = root_ + "/own";
  ASSERT_EQ(mkdir(own.c_str(), 0700), 0);
  ASSERT_EQ(chown(own.c_str(), kVictim, kVictim), 0);
  ASSERT_EQ(symlink(own.c_str(), (root_ + "/ddp-4712").c_str()), 0);
  ASSERT_EQ(lchown((root_ + "/ddp-4712").c_str(), kAttacker, kAttacker), 0);

  const auto refused = [&](const std::string& dir, const std::string& expected) {
    return as_user(kVictim, [&] {
      const std::string message = error_of([&] { prepare_snapshot_dir(dir, kOption, kDeadline); });
      if (message.find(expected) == std::string::npos || message.find('\n') != std::string::npos) {
        std::fprintf(stderr, "for %s expected [%s] in [%s]\n", dir.c_str(), expected.c_str(), message.c_str());
        return false;
      }
      return true;
    });
  };
  EXPECT_EQ(refused(planted, "snapshot directory '" + planted +
                                 "' is owned by uid 65533, not by you (uid 65534): its "
                                 "owner could read, replace or delete your snapshots; use a directory of your own "
                                 "(--ddp-snapshot-dir)"),
            0);
  EXPECT_EQ(refused(parent + "/4711", "lies in '" + parent + "', which uid 65533 owns: its owner could replace"), 0);
  EXPECT_EQ(refused(root_ + "/ddp-4712", "is a symbolic link"), 0);
  // Nothing was created in the attacker's directories.
  EXPECT_FALSE(std::filesystem::exists(parent + "/4711"));
  // The victim's own directory in the sticky scratch directory is fine.
  EXPECT_EQ(
      as_user(kVictim,
              [&] { return error_of([&] { prepare_snapshot_dir(root_ + "/ddp-4713", kOption, kDeadline); }).empty(); }),
      0);
}

// A directory above the snapshot directory decides who can swap it: its owner, and whoever may write it unless the
// sticky bit stops them from renaming what is not theirs. Each parent below is set up as the victim finds it, and
// the victim's step must refuse it with one line naming that parent; the parents it accepts are those only root or
// the victim control.
TEST_F(SnapshotDirTest, AParentOthersControlIsRefusedWithOneLineNamingIt) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to act as two users";
  ASSERT_EQ(chmod(root_.c_str(), 0755), 0);
  struct Parent {
    std::string name;
    uid_t owner;
    mode_t mode;
    std::string refusal;  // empty: accepted
  };
  const std::vector<Parent> parents = {
      {"group-writable", 0, 0775, "which its group may write (mode 0775, no sticky bit): they could replace"},
      {"everyone-writable-root", 0, 0777, "which everyone may write (mode 0777, no sticky bit)"},
      {"own-group-writable", kVictim, 02770, "which its group may write (mode 2770, no sticky bit)"},
      {"sticky-of-another", kAttacker, 01777, "which uid 65533 owns: its owner could replace the snapshot directory"},
      {"plain-of-another", kAttacker, 0755, "which uid 65533 owns: its owner could replace the snapshot directory"},
      {"sticky-of-root", 0, 01777, ""},
      {"group-sticky-of-root", 0, 01775, ""},
      {"plain-of-root", 0, 0755, ""},
      {"own", kVictim, 0755, ""},
  };
  for (const Parent& parent : parents) {
    const std::string path = root_ + "/" + parent.name;
    ASSERT_EQ(mkdir(path.c_str(), 0700), 0);
    ASSERT_EQ(chown(path.c_str(), parent.owner, parent.owner), 0);
    ASSERT_EQ(chmod(path.c_str(), parent.mode), 0);
    // Where the victim may not create, the directory is there already, made by the victim.
    ASSERT_EQ(mkdir((path + "/snapshots").c_str(), 0700), 0);
    ASSERT_EQ(chown((path + "/snapshots").c_str(), kVictim, kVictim), 0);
    const int held = as_user(kVictim, [&] {
      const std::string message = error_of([&] { prepare_snapshot_dir(path + "/snapshots", kOption, kDeadline); });
      const std::string expected = parent.refusal.empty() ? ""
                                                          : "snapshot directory '" + path + "/snapshots' lies in '" +
                                                                path + "', " + parent.refusal;
      const bool ok = parent.refusal.empty()
                          ? message.empty()
                          : message.rfind(expected, 0) == 0 && message.find('\n') == std::string::npos;
      if (!ok)
        std::fprintf(stderr, "%s: expected [%s...], got [%s]\n", parent.name.c_str(), expected.c_str(),
                     message.c_str());
      return ok;
    });
    EXPECT_EQ(held, 0) << parent.name;
  }
}

// In a rootless container (ch-run, Apptainer, enroot) the node's root is not mapped, and its directories (/, /tmp)
// show the overflow uid 65534 there: they count as root's, or no snapshot directory could be used inside. Outside
// such a namespace, a parent that uid 65534 really owns is another user's, as any other.
TEST_F(SnapshotDirTest, TheOverflowUidCountsAsRootOnlyInAUserNamespaceWithoutRoot) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to act as two users";
  constexpr uid_t kUser = 65531;
  ASSERT_EQ(chmod(root_.c_str(), 0755), 0);
  const std::string nobodys = root_ + "/nobodys";
  const std::string home = root_ + "/home";
  for (const auto& [path, owner] : {std::pair{nobodys, kVictim}, std::pair{home, kUser}}) {
    ASSERT_EQ(mkdir(path.c_str(), 0755), 0);
    ASSERT_EQ(chown(path.c_str(), owner, owner), 0);
  }
  ASSERT_EQ(as_user(kUser,
                    [&] {
                      return error_of([&] {
                               prepare_snapshot_dir(nobodys + "/snap", kOption, kDeadline);
                             }).find("lies in '" + nobodys + "', which uid 65534 owns") != std::string::npos;
                    }),
            0);
  const int held = as_user(kUser, [&] {
    if (unshare(CLONE_NEWUSER) != 0) _exit(77);
    prctl(PR_SET_DUMPABLE, 1);  // cleared by the switch from root: /proc/self would stay root's, its maps unwritable
    const std::string map = std::to_string(kUser) + " " + std::to_string(kUser) + " 1\n";
    for (const auto& [file, text] : {std::pair{"/proc/self/setgroups", std::string("deny")},
                                     std::pair{"/proc/self/uid_map", map}, std::pair{"/proc/self/gid_map", map}}) {
      std::FILE* out = std::fopen(file, "w");
      if (out == nullptr || std::fputs(text.c_str(), out) < 0 || std::fclose(out) != 0) return false;
    }
    struct stat top = {};
    if (stat(root_.c_str(), &top) != 0 || top.st_uid != 65534) return false;  // root's, as the container shows it
    const std::string message = error_of([&] { prepare_snapshot_dir(home + "/snap", kOption, kDeadline); });
    if (!message.empty()) std::fprintf(stderr, "in the user namespace: %s\n", message.c_str());
    return message.empty();
  });
  if (held == 77) GTEST_SKIP() << "no user namespaces here (unshare(CLONE_NEWUSER) refused)";
  EXPECT_EQ(held, 0);
  EXPECT_TRUE(fs::is_directory(home + "/snap"));
}

TEST_F(SnapshotDirTest, ChecksAsTheUserNotAsRoot) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to switch to an unprivileged user";
  // A root-owned 0755 directory: root could write there, user nobody cannot, and the check must say so.
  ASSERT_EQ(chmod(root_.c_str(), 0755), 0);
  EXPECT_EQ(as_user(kVictim,
                    [&] {
                      const std::string message = error_of([&] { prepare_snapshot_dir(root_, kOption, kDeadline); });
                      const std::string below =
                          error_of([&] { prepare_snapshot_dir(root_ + "/sub", kOption, kDeadline); });
                      return message.find("is owned by uid 0, not by you") != std::string::npos &&
                             below.find("cannot be created") != std::string::npos;
                    }),
            0);
}

// A file system that hangs (here: an ext4 image frozen with fsfreeze, where mkdir waits
// uninterruptibly) must cost the task its deadline, with one line, not hang the step. In a child process with a
// mount namespace of its own, so nothing is left mounted on failure.
TEST_F(SnapshotDirTest, AHungFileSystemFailsAtTheDeadlineWithOneLine) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to mount and freeze a file system";
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (unshare(CLONE_NEWNS) != 0 || mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) _exit(77);
    const std::string image = root_ + "/image", point = root_ + "/mnt";
    const std::string setup = "truncate -s 16M " + image + " && mkfs.ext4 -q " + image + " && mkdir " + point +
                              " && mount -o loop " + image + " " + point + " && fsfreeze -f " + point;
    if (std::system((setup + " 2>/dev/null").c_str()) != 0) _exit(77);
    const std::string message =
        error_of([&] { prepare_snapshot_dir(point + "/alice/snapshots", kOption, std::chrono::milliseconds(1500)); });
    std::system(("fsfreeze -u " + point + "; umount -l " + point).c_str());
    const bool ok = message == "snapshot directory '" + point +
                                   "/alice/snapshots' did not answer within 1.5 s: its "
                                   "file system hangs on this node; check the mount, or use another directory "
                                   "(--ddp-snapshot-dir)";
    if (!ok) std::fprintf(stderr, "got [%s]\n", message.c_str());
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  if (WEXITSTATUS(status) == 77) GTEST_SKIP() << "no loop device, mkfs.ext4 or fsfreeze here";
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

StepPlan plan_with(const Options& options, const Config& config) {
  StepInfo step;
  step.job_id = 4711;
  step.num_nodes = step.num_tasks = step.local_tasks = 1;
  step.node_list = "n1";
  step.user = "alice";
  step.job_name = "resnet";
  return plan_step(step, options, config, {32768, 60999});
}

EnvLookup env_with(std::optional<std::string> snapshot_dir) {
  return [snapshot_dir](const std::string& name) { return name == "DDP_SNAPSHOT_DIR" ? snapshot_dir : std::nullopt; };
}

TEST(SnapshotDirPlan, OptionBeatsEnvironmentWhichBeatsAdminDefault) {
  Options options;
  options.enabled = true;
  Config config;
  config.snapshot_dir = "/fsx/%u/%j";

  StepPlan plan = plan_with(options, config);
  EXPECT_EQ(task_env(plan, {}, env_with(std::nullopt)).value("DDP_SNAPSHOT_DIR"), "/fsx/alice/4711");
  EXPECT_EQ(snapshot_dir_to_prepare(plan, env_with(std::nullopt)), "/fsx/alice/4711");
  EXPECT_EQ(task_env(plan, {}, env_with("/mine")).value("DDP_SNAPSHOT_DIR"), "/mine");
  EXPECT_EQ(snapshot_dir_to_prepare(plan, env_with("/mine")), std::nullopt);

  options.snapshot_dir = "/scratch/%x";
  plan = plan_with(options, config);
  EXPECT_EQ(task_env(plan, {}, env_with("/mine")).value("DDP_SNAPSHOT_DIR"), "/scratch/resnet");
  EXPECT_EQ(snapshot_dir_to_prepare(plan, env_with("/mine")), "/scratch/resnet");

  EXPECT_EQ(task_env(plan_with({}, Config{}), {}, env_with(std::nullopt)).value("DDP_SNAPSHOT_DIR"), std::nullopt);
}

}  // namespace
}  // namespace ddp
