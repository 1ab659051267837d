#include "spank_plugin/step/task_env.hpp"

#include <gtest/gtest.h>

#include <map>

#include "core/error.hpp"
#include "spank_plugin/step/step.hpp"
#include "steps.hpp"

namespace ddp {
namespace {

const PortRange kEphemeral{32768, 60999};

using test::ddp_on;
using test::two_by_two;

EnvLookup user_env(std::map<std::string, std::string> values) {
  return [values](const std::string& name) -> std::optional<std::string> {
    const auto found = values.find(name);
    if (found == values.end()) return std::nullopt;
    return found->second;
  };
}

std::map<std::string, std::string> as_map(const TaskEnv& env) {
  std::map<std::string, std::string> values;
  for (const EnvVar& var : env.vars()) values[var.name] = var.value;
  return values;
}

TEST(TaskEnv, TorchrunContractForEveryTaskOfTwoNodesByTwoTasks) {
  const Config config;
  for (uint32_t node = 0; node < 2; ++node) {
    const StepPlan plan = plan_step(two_by_two(node), ddp_on(), config, kEphemeral);
    for (uint32_t local = 0; local < 2; ++local) {
      const uint32_t rank = node * 2 + local;
      const auto env = as_map(task_env(plan, {rank, local, node}, user_env({})));
      const std::map<std::string, std::string> expected = {
          {"RANK", std::to_string(rank)},
          {"LOCAL_RANK", std::to_string(local)},
          {"WORLD_SIZE", "4"},
          {"LOCAL_WORLD_SIZE", "2"},
          {"NODE_RANK", std::to_string(node)},
          {"GROUP_RANK", std::to_string(node)},
          {"GROUP_WORLD_SIZE", "2"},
          {"ROLE_NAME", "default"},
          {"ROLE_RANK", std::to_string(rank)},
          {"ROLE_WORLD_SIZE", "4"},
          {"MASTER_ADDR", "node1"},
          {"MASTER_PORT", std::to_string(hashed_port(812, 3, config.port_range))},
          {"TORCHELASTIC_RUN_ID", "812.3"},
          {"TORCHELASTIC_RESTART_COUNT", "1"},
          {"TORCHELASTIC_MAX_RESTARTS", "0"},
          {"TORCHELASTIC_USE_AGENT_STORE", "False"},
          {"DDP_BACKEND", "auto"},
          {"OMP_NUM_THREADS", "3"},
          {"USE_LIBUV", "0"},
      };
      EXPECT_EQ(env, expected) << "rank " << rank;
    }
  }
}

TEST(TaskEnv, UserThreadsWinButStaleContractValuesAreReplaced) {
  const StepPlan plan = plan_step(two_by_two(1), ddp_on(), Config{}, kEphemeral);
  const TaskEnv env = task_env(
      plan, {3, 1, 1}, user_env({{"OMP_NUM_THREADS", "8"}, {"USE_LIBUV", "1"}, {"RANK", "0"}, {"WORLD_SIZE", "1"}}));
  EXPECT_EQ(env.value("OMP_NUM_THREADS"), "8");
  EXPECT_EQ(env.value("USE_LIBUV"), "1");
  EXPECT_EQ(env.value("RANK"), "3");
  EXPECT_EQ(env.value("WORLD_SIZE"), "4");
  for (const EnvVar& var : env.vars()) {
    EXPECT_EQ(var.origin == Origin::User, var.name == "OMP_NUM_THREADS" || var.name == "USE_LIBUV") << var.name;
  }
}

// --ddp-recover tells the program to recover in place; without it, no DDP_RECOVER, whatever the user's environment.
TEST(TaskEnv, RecoverInPlaceOnlyWhenAsked) {
  Options options = ddp_on();
  EXPECT_EQ(
      task_env(plan_step(two_by_two(0), options, Config{}, kEphemeral), {0, 0, 0}, user_env({})).value("DDP_RECOVER"),
      std::nullopt);
  options.recover = true;
  const TaskEnv env =
      task_env(plan_step(two_by_two(0), options, Config{}, kEphemeral), {0, 0, 0}, user_env({{"DDP_RECOVER", "none"}}));
  EXPECT_EQ(env.value("DDP_RECOVER"), "in-place");
}

TEST(TaskEnv, BackendAndPortFromOptionsOrAdminDefaults) {
  Config config;
  config.default_backend = Backend::Gloo;
  config.port_range = {21000, 21999};
  Options options = ddp_on();
  StepPlan plan = plan_step(two_by_two(0), options, config, kEphemeral);
  EXPECT_EQ(plan.backend, Backend::Gloo);
  EXPECT_TRUE(config.port_range.contains(plan.master_port.number));
  options.backend = Backend::Nccl;
  options.master_port = 29500;
  plan = plan_step(two_by_two(0), options, config, kEphemeral);
  EXPECT_EQ(plan.backend, Backend::Nccl);
  EXPECT_EQ(plan.master_port.number, 29500);
  EXPECT_EQ(plan.master_port.source, PortSource::User);
}

TEST(TaskEnv, BindingChoicesFromOptionsOrAdminDefaults) {
  Config config;
  config.bind = BindMode::None;
  config.nic = "ens5";
  config.topology_xml = "/etc/slurm/node.xml";
  Options options = ddp_on();
  StepPlan plan = plan_step(two_by_two(0), options, config, kEphemeral);
  EXPECT_EQ(plan.bind, BindMode::None);
  EXPECT_EQ(plan.nic, "ens5");
  EXPECT_EQ(plan.topology_xml, "/etc/slurm/node.xml");
  EXPECT_FALSE(plan.check);
  options.bind = BindMode::Closest;
  options.nic = "ib0";
  options.check = true;
  plan = plan_step(two_by_two(0), options, config, kEphemeral);
  EXPECT_EQ(plan.bind, BindMode::Closest);
  EXPECT_EQ(plan.nic, "ib0");
  EXPECT_TRUE(plan.check);
  EXPECT_EQ(plan_step(two_by_two(0), ddp_on(), Config{}, kEphemeral).nic, std::nullopt);
}

TEST(TaskEnv, ReservedPortsFromSlurm) {
  StepInfo step = two_by_two(0);
  step.reserved_ports = "12010-12011";
  const StepPlan plan = plan_step(step, ddp_on(), Config{}, kEphemeral);
  EXPECT_EQ(plan.master_port.number, 12010);
  EXPECT_EQ(plan.master_port.source, PortSource::Reserved);
}

TEST(TaskEnv, AdminRangeInsideEphemeralRangeIsRefused) {
  Config config;
  config.port_range = {40000, 40999};
  try {
    plan_step(two_by_two(0), ddp_on(), config, kEphemeral);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "port_range=40000-40999 in plugstack.conf overlaps the kernel's ephemeral port range 32768-60999 "
              "(net.ipv4.ip_local_port_range); choose a port_range outside it, e.g. 20000-29999");
  }
  Options options = ddp_on();
  options.master_port = 40001;  // the user's explicit choice is not second-guessed
  EXPECT_EQ(plan_step(two_by_two(0), options, config, kEphemeral).master_port.number, 40001);
}

TEST(TaskEnv, MissingOrMalformedNodeListFails) {
  StepInfo step = two_by_two(0);
  step.node_list = "";
  EXPECT_THROW(plan_step(step, ddp_on(), Config{}, kEphemeral), Error);
  step.node_list = "node[1-";
  EXPECT_THROW(plan_step(step, ddp_on(), Config{}, kEphemeral), Error);
}

TEST(TaskEnv, InconsistentStepsAndTasksFail) {
  StepInfo step = two_by_two(0);
  step.local_tasks = 5;
  EXPECT_THROW(plan_step(step, ddp_on(), Config{}, kEphemeral), Error);
  const StepPlan plan = plan_step(two_by_two(0), ddp_on(), Config{}, kEphemeral);
  EXPECT_THROW(task_env(plan, {0, 2, 0}, user_env({})), Error);  // local task 2 of 2
  EXPECT_THROW(task_env(plan, {4, 0, 0}, user_env({})), Error);  // rank 4 of 4
  EXPECT_THROW(task_env(plan, {0, 0, 2}, user_env({})), Error);  // node 2 of 2
}

TEST(TaskEnv, VerboseLineIsOneStableLine) {
  StepInfo step = two_by_two(1);
  Options options = ddp_on();
  options.master_port = 29500;
  const StepPlan plan = plan_step(step, options, Config{}, kEphemeral);
  const std::string line =
      verbose_line(plan, {2, 0, 1}, task_env(plan, {2, 0, 1}, user_env({{"OMP_NUM_THREADS", "8"}})));
  EXPECT_EQ(line,
            "ddp: rank 2 on node2 (port from user): RANK=2 LOCAL_RANK=0 WORLD_SIZE=4 LOCAL_WORLD_SIZE=2 NODE_RANK=1 "
            "GROUP_RANK=1 GROUP_WORLD_SIZE=2 ROLE_NAME=default ROLE_RANK=2 ROLE_WORLD_SIZE=4 MASTER_ADDR=node1 "
            "MASTER_PORT=29500 TORCHELASTIC_RUN_ID=812.3 TORCHELASTIC_RESTART_COUNT=1 TORCHELASTIC_MAX_RESTARTS=0 "
            "TORCHELASTIC_USE_AGENT_STORE=False DDP_BACKEND=auto OMP_NUM_THREADS=8[user] USE_LIBUV=0");
}

// Under srun --export=NONE the task's own environment lacks DDP_JOB_KEY: the plugin gives it the job's key (which
// reached slurmstepd under its carrier's name), and --ddp-verbose, whose lines go to output files, never prints it.
TEST(TaskEnv, TheJobsKeyReachesTheTaskButNeverTheVerboseLine) {
  StepInfo step = two_by_two(0);
  step.job_key = "0123456789abcdef0123456789abcdef";
  const StepPlan plan = plan_step(step, ddp_on(), Config{}, kEphemeral);
  const TaskEnv env = task_env(plan, {0, 0, 0}, user_env({}));
  EXPECT_EQ(env.value(kJobKeyVariable), step.job_key);
  const std::string line = verbose_line(plan, {0, 0, 0}, env);
  EXPECT_EQ(line.find(step.job_key), std::string::npos) << line;
  EXPECT_NE(line.find(" DDP_JOB_KEY=(secret) "), std::string::npos) << line;
}

TEST(Step, SpecialStepsAreNotApplicationSteps) {
  EXPECT_TRUE(is_application_step(0));
  EXPECT_TRUE(is_application_step(12345));
  EXPECT_FALSE(is_application_step(0xfffffffa));  // interactive
  EXPECT_FALSE(is_application_step(0xfffffffb));  // batch
  EXPECT_FALSE(is_application_step(0xfffffffc));  // extern
}

TEST(TaskEnv, FailureReportingKeepsTheUsersWatchdogSettings) {
  TaskEnv env([](const std::string& name) -> std::optional<std::string> {
    if (name == "TORCH_NCCL_TRACE_BUFFER_SIZE") return "64";
    if (name == "TORCHELASTIC_ERROR_FILE") return "/stale/outer/launcher.json";
    return std::nullopt;
  });
  add_failure_reporting(env, std::string("/logs/12.3"), 5, "node3");
  EXPECT_EQ(env.value("TORCHELASTIC_ERROR_FILE"), "/logs/12.3/error-rank5-node3.json");
  EXPECT_EQ(env.value("TORCH_NCCL_ASYNC_ERROR_HANDLING"), "3");
  EXPECT_EQ(env.value("TORCH_NCCL_DUMP_ON_TIMEOUT"), "1");
  EXPECT_EQ(env.value("TORCH_NCCL_TRACE_BUFFER_SIZE"), "64");
  EXPECT_EQ(env.value("TORCH_NCCL_DEBUG_INFO_TEMP_FILE"), "/logs/12.3/nccl-node3-rank");

  TaskEnv without_dir([](const std::string&) { return std::nullopt; });
  add_failure_reporting(without_dir, std::nullopt, 5, "node3");
  EXPECT_FALSE(without_dir.value("TORCHELASTIC_ERROR_FILE"));
  EXPECT_FALSE(without_dir.value("TORCH_NCCL_DEBUG_INFO_TEMP_FILE"));
  EXPECT_EQ(without_dir.value("TORCH_NCCL_ASYNC_ERROR_HANDLING"), "3");
}

}  // namespace
}  // namespace ddp
