#include "snapshot_dir.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "error.hpp"
#include "task_env.hpp"

namespace ddp {
namespace {

namespace fs = std::filesystem;
const PathVars kVars{"alice", "4711", "resnet"};

std::string error_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

class SnapshotDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char name[] = "/tmp/ddp-snapdir-XXXXXX";
    ASSERT_NE(mkdtemp(name), nullptr);
    root_ = name;
  }
  void TearDown() override { fs::remove_all(root_); }
  std::string root_;
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

TEST_F(SnapshotDirTest, CreatesMissingParentsPrivately) {
  const std::string dir = root_ + "/alice/job-1/snapshots";
  prepare_snapshot_dir(dir);
  for (const std::string& created : {root_ + "/alice", root_ + "/alice/job-1", dir}) {
    struct stat info = {};
    ASSERT_EQ(stat(created.c_str(), &info), 0) << created;
    EXPECT_EQ(info.st_mode & 0777, 0700u) << created;
  }
  prepare_snapshot_dir(dir);  // a requeued job finds it again
}

TEST_F(SnapshotDirTest, AFileIsNotADirectory) {
  const std::string file = root_ + "/file";
  std::FILE* created = std::fopen(file.c_str(), "w");
  ASSERT_NE(created, nullptr) << file;
  std::fclose(created);
  EXPECT_NE(error_of([&] { prepare_snapshot_dir(file); }).find("is not a directory"), std::string::npos);
  EXPECT_NE(error_of([&] { prepare_snapshot_dir(file + "/below"); }).find("cannot be created"), std::string::npos);
}

TEST_F(SnapshotDirTest, ChecksAsTheUserNotAsRoot) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to switch to an unprivileged user";
  // A root-owned 0755 directory: root could write there, user nobody cannot, and the check must say so.
  ASSERT_EQ(chmod(root_.c_str(), 0755), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (setresgid(65534, 65534, 65534) != 0 || setresuid(65534, 65534, 65534) != 0) _exit(3);
    const std::string message = error_of([&] { prepare_snapshot_dir(root_); });
    const bool named = message.find("snapshot directory '" + root_ + "' is not writable") != std::string::npos;
    const std::string below = error_of([&] { prepare_snapshot_dir(root_ + "/sub"); });
    _exit(named && below.find("cannot be created") != std::string::npos ? 0 : 1);
  }
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
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
