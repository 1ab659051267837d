// The contract's way through containers: DDP_CONTRACT as ddp.so writes it, the programs' check of what reached
// them (cleared by --cleanenv, replaced by pyxis with enroot's pytorch hook), which runtime a process is in, and
// a prepared snapshot directory a container does not mount.
#include "core/container.hpp"

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

#include "core/error.hpp"
#include "core/launch.hpp"
#include "spank_plugin/step/task_env.hpp"
#include "steps.hpp"
#include "test_common.hpp"

namespace ddp {
namespace {

std::string error_of(const EnvLookup& env) {
  return ddp::testing::error_of<Error>([&] { check_contract(env); });
}

// What ddp.so exported for rank 3 of a 2 x 2 step, as the task sees it before anything else runs.
std::map<std::string, std::string> exported_task() {
  std::map<std::string, std::string> task = {{"RANK", "3"},
                                             {"LOCAL_RANK", "1"},
                                             {"WORLD_SIZE", "4"},
                                             {"LOCAL_WORLD_SIZE", "2"},
                                             {"NODE_RANK", "1"},
                                             {"MASTER_ADDR", "node1"},
                                             {"MASTER_PORT", "26166"},
                                             {"OMP_NUM_THREADS", "2"},
                                             {"USE_LIBUV", "0"},
                                             {"DDP_SNAPSHOT_DIR", "/fsx/a b%c"}};
  ContractValues contract;
  for (const std::string& name : contract_names()) contract.emplace_back(name, task.at(name));
  task[kContractVariable] = encode_contract(contract);
  task[kCleanEnvContractVariable] = task[kContractVariable];
  return task;
}

TEST(Contract, EncodesSpacesAndPercentSignsAndReadsThemBack) {
  const ContractValues values = {{"MASTER_ADDR", "node1"}, {"DDP_SNAPSHOT_DIR", "/fsx/a b%c\nd"}};
  const std::string text = encode_contract(values);
  EXPECT_EQ("MASTER_ADDR=node1 DDP_SNAPSHOT_DIR=/fsx/a%20b%25c%0Ad", text);
  EXPECT_EQ(values, decode_contract(text));
}

TEST(Contract, RefusesTextItDidNotWrite) {
  for (const std::string bad : {"", "RANK", "=3", "RANK=%4", "RANK=%zz"}) {
    EXPECT_THROW(decode_contract(bad), Error) << bad;
  }
  EXPECT_NE(std::string::npos, error_of(env_with({{"DDP_CONTRACT", "RANK"}})).find("was not written by srun --ddp"));
}

TEST(Contract, HoldsWhenEveryValueArrived) {
  EXPECT_EQ("", error_of(env_with(exported_task())));
  // Not started by srun --ddp: nothing to compare.
  EXPECT_EQ("", error_of(env_with({{"RANK", "0"}})));
}

TEST(Contract, NamesAReplacedPortAndThePluginOrderThatLetItStand) {
  std::map<std::string, std::string> task = exported_task();
  // pyxis listed after ddp.so, with an image that sets PYTORCH_VERSION: enroot's hook's values win.
  task["MASTER_PORT"] = std::to_string(812 % 4536 + 61000);
  task["WORLD_SIZE"] = "8";
  task["PYTORCH_VERSION"] = "2.6.0";
  const std::string message = error_of(env_with(task));
  EXPECT_NE(std::string::npos, message.find("WORLD_SIZE=8, MASTER_PORT=61812 in this program, but srun --ddp set "
                                            "WORLD_SIZE=4, MASTER_PORT=26166"))
      << message;
  EXPECT_NE(std::string::npos, message.find("50-slurm-pytorch.sh")) << message;
  EXPECT_NE(std::string::npos, message.find("list ddp.so after pyxis in plugstack.conf")) << message;
  EXPECT_EQ(std::string::npos, message.find('\n'));
}

TEST(Contract, NamesACleanEnvironmentAndTheOptionThatCarriesTheValuesThrough) {
  // apptainer exec --cleanenv without --ddp-cleanenv: only APPTAINERENV_DDP_CONTRACT got in, as DDP_CONTRACT.
  const std::string contract = exported_task().at(kContractVariable);
  const std::string message =
      error_of(env_with({{"DDP_CONTRACT", contract}, {"APPTAINER_CONTAINER", "/images/torch.sif"}}));
  EXPECT_NE(std::string::npos, message.find("but none reached this program")) << message;
  EXPECT_NE(std::string::npos, message.find("apptainer/singularity exec --cleanenv")) << message;
  EXPECT_NE(std::string::npos, message.find("srun --ddp-cleanenv=apptainer")) << message;
}

TEST(Contract, IsCheckedBeforeTheLauncherIsRead) {
  std::map<std::string, std::string> task = exported_task();
  task["MASTER_PORT"] = "61003";
  EXPECT_THROW(launch_from_environment(env_with(task)), Error);
  // Cleared: without the check the program would have run alone, as one process of its own.
  EXPECT_THROW(launch_from_environment(env_with({{"DDP_CONTRACT", task.at(kContractVariable)}})), Error);
  EXPECT_EQ(3, launch_from_environment(env_with(exported_task())).rank);
}

TEST(Contract, TaskExportsHoldTheContractTheCleanEnvCopiesAndTheMarker) {
  StepInfo step = test::two_by_two(1);
  step.user = "alice";
  Options options = test::ddp_on();
  options.snapshot_dir = "/fsx/%u";
  const StepPlan plan = plan_step(step, options, Config{}, PortRange{32768, 60999});
  const TaskEnv env = task_env(plan, TaskInfo{3, 1, 1}, env_with({{"OMP_NUM_THREADS", "8"}}));
  std::map<std::string, std::string> off;
  for (const auto& [name, value] : task_exports(env, CleanEnv::Off)) off[name] = value;
  EXPECT_EQ(0u, off.count("OMP_NUM_THREADS")) << "the user's own value is left as it is";
  EXPECT_EQ("RANK=3 LOCAL_RANK=1 WORLD_SIZE=4 LOCAL_WORLD_SIZE=2 NODE_RANK=1 MASTER_ADDR=node1 MASTER_PORT=" +
                off.at("MASTER_PORT") + " DDP_SNAPSHOT_DIR=/fsx/alice",
            off.at("DDP_CONTRACT"));
  EXPECT_EQ(off.at("DDP_CONTRACT"), off.at("APPTAINERENV_DDP_CONTRACT"));
  EXPECT_EQ(0u, off.count("APPTAINERENV_RANK"));
  EXPECT_EQ(0u, off.count("SINGULARITYENV_DDP_CONTRACT")) << "apptainer would say it prefers the other spelling";

  std::map<std::string, std::string> apptainer;
  for (const auto& [name, value] : task_exports(env, CleanEnv::Apptainer)) apptainer[name] = value;
  for (const auto& [name, value] : off) {
    if (name.rfind("APPTAINERENV_", 0) == 0) continue;
    EXPECT_EQ(value, apptainer.at("APPTAINERENV_" + name)) << name;
    EXPECT_EQ(0u, apptainer.count("SINGULARITYENV_" + name)) << name;
  }
  std::map<std::string, std::string> singularity;
  for (const auto& [name, value] : task_exports(env, CleanEnv::Singularity)) singularity[name] = value;
  EXPECT_EQ("3", singularity.at("SINGULARITYENV_RANK"));
  EXPECT_EQ(off.at("DDP_CONTRACT"), singularity.at("SINGULARITYENV_DDP_CONTRACT"));
  EXPECT_EQ(off.at("DDP_CONTRACT"), singularity.at("APPTAINERENV_DDP_CONTRACT"));
}

TEST(ContainerRuntime, IsReadFromWhatEachRuntimeSetsInside) {
  EXPECT_EQ(ContainerRuntime::None, container_from_environment(env_with({})).runtime);
  EXPECT_EQ(ContainerRuntime::Charliecloud,
            container_from_environment(env_with({{"CH_RUNNING", "Weird Al Yankovic"}})).runtime);
  EXPECT_EQ(ContainerRuntime::Apptainer, container_from_environment(env_with({{"APPTAINER_CONTAINER", "x"}})).runtime);
  EXPECT_EQ(ContainerRuntime::Apptainer,
            container_from_environment(env_with({{"SINGULARITY_CONTAINER", "x"}})).runtime);
  EXPECT_EQ(ContainerRuntime::SlurmOci, container_from_environment(env_with({{"SLURM_CONTAINER", "/b"}})).runtime);
  EXPECT_STREQ("ch-run -b SRC[:DST]", container_kind(ContainerRuntime::Charliecloud).mount);
  EXPECT_NE(std::string::npos, every_mount_option().find("srun --container-mounts=SRC:DST"));
}

TEST(CpuBinding, IsAppliedAgainWhereARuntimeResetIt) {
  cpu_set_t original;
  ASSERT_EQ(0, sched_getaffinity(0, sizeof original, &original));
  int first = -1;
  for (int cpu = 0; cpu < CPU_SETSIZE && first < 0; ++cpu) first = CPU_ISSET(cpu, &original) ? cpu : -1;
  ASSERT_GE(first, 0);
  const std::string mine = std::to_string(first);
  if (CPU_COUNT(&original) == 1) GTEST_SKIP() << "one CPU: nothing to narrow";
  // As after runc 1.2 started the program: every CPU again, where ddp.so had bound the task to one.
  const auto rebound = restore_cpu_binding(env_with({{"DDP_CPU_BIND", mine}}));
  ASSERT_TRUE(rebound.has_value());
  EXPECT_EQ(mine, rebound->after);
  cpu_set_t now;
  ASSERT_EQ(0, sched_getaffinity(0, sizeof now, &now));
  EXPECT_EQ(1, CPU_COUNT(&now));
  EXPECT_TRUE(CPU_ISSET(first, &now));
  // Already bound: nothing to do.
  EXPECT_FALSE(restore_cpu_binding(env_with({{"DDP_CPU_BIND", mine}})).has_value());
  EXPECT_FALSE(restore_cpu_binding(env_with({})).has_value());
  EXPECT_THROW(restore_cpu_binding(env_with({{"DDP_CPU_BIND", "0-x"}})), Error);
  ASSERT_EQ(0, sched_setaffinity(0, sizeof original, &original));
  EXPECT_THROW(restore_cpu_binding(env_with({{"DDP_CPU_BIND", std::to_string(CPU_SETSIZE - 1)}})), Error)
      << "a CPU the process may not use";
}

class PreparedDir : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/ddp-container-test.XXXXXX";
    ASSERT_NE(nullptr, mkdtemp(pattern));
    dir_ = pattern;
  }
  void TearDown() override { rmdir(dir_.c_str()); }

  std::map<std::string, std::string> srun_ddp_made(const std::string& path) {
    return {{"DDP_CONTRACT", encode_contract({{"RANK", "0"}, {"DDP_SNAPSHOT_DIR", path}})},
            {"SLURMD_NODENAME", "node1"}};
  }

  std::string dir_;
};

TEST_F(PreparedDir, IsThereInTheSameView) {
  EXPECT_NO_THROW(require_prepared_dir(dir_, env_with(srun_ddp_made(dir_))));
}

TEST_F(PreparedDir, MissingInAContainerIsNamedWithItsMountOption) {
  const std::string missing = dir_ + "/not-mounted";
  std::map<std::string, std::string> env = srun_ddp_made(missing);
  env["CH_RUNNING"] = "Weird Al Yankovic";
  try {
    require_prepared_dir(missing, env_with(env));
    FAIL() << "a missing prepared directory was accepted";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(std::string::npos, message.find("does not exist inside this container (Charliecloud (ch-run))"))
        << message;
    EXPECT_NE(std::string::npos, message.find("ch-run -b SRC[:DST]")) << message;
    EXPECT_NE(std::string::npos, message.find("created it on node1")) << message;
  }
  // No container variable: every runtime's option.
  env.erase("CH_RUNNING");
  try {
    require_prepared_dir(missing, env_with(env));
    FAIL() << "a missing prepared directory was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string::npos, std::string(e.what()).find("apptainer exec --bind")) << e.what();
  }
  // A directory srun --ddp did not prepare is the program's to create.
  EXPECT_NO_THROW(require_prepared_dir(dir_ + "/other", env_with(env)));
  EXPECT_NO_THROW(require_prepared_dir(missing, env_with({})));
}

}  // namespace
}  // namespace ddp
