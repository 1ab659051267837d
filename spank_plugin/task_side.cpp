// slurmstepd: once per node (user_init) the step's plan; per task (task_init, in the task's own process as the
// user, before exec) the snapshot directory and its environment. Nothing here touches shared storage inside
// slurmstepd itself, and nothing reads a file the user chose: the topology is the admin's topology_xml, the
// per-boot cache or the running system, never the job's HWLOC_XMLFILE (ddp-topo --xml plans for a file).
// user_init failures would only say "launch failed" and leave srun's exit code 0, so every problem is kept
// and reported from task_init, where the task ends itself before exec (exit status 1, srun's too), whether
// plugstack.conf loads ddp.so as "required" or "optional".
// Containers (container.hpp, mount_view.hpp): a plugin listed before ddp.so (pyxis) has moved the task into its
// container's mount namespace by task_init; the topology and the network were read in user_init, in the node's
// view, so the binding plans from the node's hardware, and the snapshot and log directories are prepared in the
// container's view, where the program will use them. A container plugin listed after ddp.so would import its
// container's environment over the contract: the step is refused before anything starts.

#include <unistd.h>

#include <cstdio>

#include "base/parse.hpp"
#include "base/resolve.hpp"
#include "base/user.hpp"
#include "core/container.hpp"
#include "core/env_names.hpp"
#include "core/error.hpp"
#include "core/netif.hpp"
#include "core/snapshot_dir.hpp"
#include "dispatch.h"
#include "plugin_state.hpp"
#include "spank_plugin/step/ports.hpp"
#include "topology/id_list.hpp"

using namespace ddp::spank;

namespace {

uint32_t item_u32(spank_t sp, spank_item_t item, const char* what) {
  uint32_t value = 0;
  if (spank_get_item(sp, item, &value) != ESPANK_SUCCESS) {
    throw ddp::Error(std::string("Slurm did not provide ") + what + " to the plugin");
  }
  return value;
}

uid_t job_uid(spank_t sp) {
  uid_t uid = 0;
  if (spank_get_item(sp, S_JOB_UID, &uid) != ESPANK_SUCCESS) throw ddp::Error("Slurm did not provide the job's uid");
  return uid;
}

// No name: %u is refused with a message rather than becoming the uid.
std::string user_name(spank_t sp) {
  const auto user = ddp::find_user(job_uid(sp));
  return user ? user->name : "";
}

std::string user_home(spank_t sp) {
  const auto user = ddp::find_user(job_uid(sp));
  return user ? user->home : "";
}

std::string step_cores(spank_t sp) {
  char* cores = nullptr;
  if (spank_get_item(sp, S_STEP_ALLOC_CORES, &cores) != ESPANK_SUCCESS || cores == nullptr) return "";
  return cores;
}

uint32_t env_u32(spank_t sp, const char* name) {
  const auto value = get_env(sp, name);
  if (!value) throw ddp::Error(std::string(name) + " is not set in the step's environment");
  return static_cast<uint32_t>(ddp::require_uint(*value, 0, UINT32_MAX, name));
}

// The job's key as srun, sbatch or salloc gave it (srun_side.cpp): under the carrier's name, which --export keeps,
// else as DDP_JOB_KEY. Without one the port would come from public ids and ddp-train's store proof from no secret:
// the step fails instead.
std::string job_key(spank_t sp) {
  for (const char* name : {ddp::kJobKeyCarrier, ddp::kJobKeyVariable}) {
    const auto key = get_env(sp, name);
    if (key && ddp::is_job_key(*key)) return *key;
  }
  throw ddp::Error(std::string("the job's key (") + ddp::kJobKeyVariable + ") did not reach this step: the srun, " +
                   "sbatch or salloc that made the job or step ran without ddp.so, or removed " + ddp::kJobKeyCarrier +
                   " from the environment; run them where plugstack.conf loads ddp.so");
}

// The job's instance (ports.hpp), as the key travels; empty when the job has none (an srun inside an allocation
// made without --ddp).
std::string job_instance(spank_t sp) {
  for (const char* name : {ddp::kJobInstanceCarrier, ddp::kJobInstanceVariable}) {
    const auto instance = get_env(sp, name);
    if (instance && ddp::is_job_instance(*instance)) return *instance;
  }
  return "";
}

ddp::StepInfo read_step(spank_t sp, uint32_t step_id) {
  ddp::StepInfo step;
  step.step_id = step_id;
  if (get_env(sp, "SLURM_HET_SIZE")) {
    // A heterogeneous step (srun A : B) is one step per component, and the SPANK items describe the component:
    // its own job id and task count. The environment srun gave every component holds the whole step, as
    // torch needs it: the het job's id (the same in all components) and the tasks and nodes of all of them.
    step.job_id = env_u32(sp, "SLURM_JOB_ID");
    step.num_nodes = env_u32(sp, "SLURM_STEP_NUM_NODES");
    step.num_tasks = env_u32(sp, "SLURM_STEP_NUM_TASKS");
  } else {
    step.job_id = item_u32(sp, S_JOB_ID, "the job id");
    step.num_nodes = item_u32(sp, S_JOB_NNODES, "the node count");
    step.num_tasks = item_u32(sp, S_JOB_TOTAL_TASK_COUNT, "the task count");
  }
  step.local_tasks = item_u32(sp, S_JOB_LOCAL_TASK_COUNT, "the local task count");
  step.cpus_per_task = item_u32(sp, S_STEP_CPUS_PER_TASK, "the CPUs per task");
  // Restarts so far: the job's requeues plus the attempts ddp-restart made inside this run of the job.
  step.restart_count = item_u32(sp, S_SLURM_RESTART_COUNT, "the restart count");
  if (const auto attempt = get_env(sp, ddp::vars::kRestartAttempt)) {
    step.restart_count += static_cast<uint32_t>(ddp::require_uint(*attempt, 0, 1000000, ddp::vars::kRestartAttempt));
  }
  step.node_list = get_env(sp, "SLURM_STEP_NODELIST").value_or("");
  step.reserved_ports = get_env(sp, "SLURM_STEP_RESV_PORTS").value_or("");
  step.job_key = job_key(sp);
  step.job_instance = job_instance(sp);
  if (const auto max_restarts = get_env(sp, ddp::vars::kMaxRestartsRequest)) {
    step.max_restarts =
        static_cast<uint32_t>(ddp::require_uint(*max_restarts, 0, 1000000, ddp::vars::kMaxRestartsRequest));
  }
  step.hostname = ddp::host_name();
  step.user = user_name(sp);
  step.home = user_home(sp);
  step.job_name = get_env(sp, "SLURM_JOB_NAME").value_or("");
  return step;
}

bool is_ddp_step(spank_t sp, uint32_t* step_id) {
  if (!spank_remote(sp) || !state().options.enabled) return false;
  return spank_get_item(sp, S_JOB_STEPID, step_id) == ESPANK_SUCCESS && ddp::is_application_step(*step_id);
}

// Read here, in slurmstepd's own namespace; a failure only leaves container views undetected.
void remember_node_view() {
  try {
    state().node_view = ddp::this_mount_view();
  } catch (const std::exception& e) {
    slurm_debug("ddp: %s: tasks in containers of plugins before ddp.so are not told apart", e.what());
  }
}

void plan_this_node(spank_t sp, uint32_t step_id) {
  PluginState& s = state();
  try {
    s.plan = ddp::plan_step(read_step(sp, step_id), s.options, s.config, ddp::read_ephemeral_range());
  } catch (const std::exception& e) {
    record_failure(e.what(), false);
    return;
  }
  try {
    const std::string master_ip = ddp::resolve_host(s.plan->master_addr);
    s.node = ddp::setup_node(*s.plan, master_ip, step_cores(sp));
  } catch (const std::exception& e) {
    record_failure(e.what() + (" (on " + s.plan->step.hostname + ")"), true);
  }
}

ddp::TaskInfo read_task(spank_t sp) {
  int local_id = -1;
  if (spank_get_item(sp, S_TASK_ID, &local_id) != ESPANK_SUCCESS || local_id < 0) {
    throw ddp::Error("Slurm did not provide the local task id to the plugin");
  }
  // SLURM_PROCID and SLURM_NODEID include the offsets of a heterogeneous job's component (S_TASK_GLOBAL_ID and
  // S_JOB_NODEID do not); both are set for the task only, after the per-node callback.
  ddp::TaskInfo task;
  task.local_rank = static_cast<uint32_t>(local_id);
  task.rank = env_u32(sp, "SLURM_PROCID");
  task.node_rank = env_u32(sp, "SLURM_NODEID");
  return task;
}

// Every task fails; one task per node (node problems) or per step (step problems) says why. The task ends here,
// before exec, with exit status 1: Slurm does the same when a "required" plugin's task_init fails, and ignores the
// failure of an "optional" one, whose task would otherwise run without any --ddp variable.
[[noreturn]] void fail_task(spank_t sp) {
  const Failure& failure = *state().failure;
  int local_id = -1;
  uint32_t node_rank = 0;
  spank_get_item(sp, S_TASK_ID, &local_id);
  spank_get_item(sp, S_JOB_NODEID, &node_rank);
  if (local_id == 0 && (failure.node_specific || node_rank == 0)) log_error(failure.message);
  std::fflush(nullptr);
  _exit(1);
}

// --ddp-check: a failed check fails the step with the reasons; warnings are printed once per node.
void check_this_node(const ddp::StepPlan& plan, const ddp::TaskInfo& task, const ddp::TaskEnv& env) {
  const ddp::CheckOutcome outcome = ddp::check_node(plan, env);
  if (!outcome.failures.empty()) {
    throw ddp::Error("--ddp-check failed on " + plan.step.hostname + ": " + outcome.failures);
  }
  if (task.local_rank != 0) return;
  if (!outcome.warnings.empty()) {
    std::fprintf(stderr, "ddp: --ddp-check warnings on %s: %s\n", plan.step.hostname.c_str(), outcome.warnings.c_str());
  }
  if (plan.verbose) {
    std::fprintf(stderr, "ddp: --ddp-check on %s: %zu checks passed\n", plan.step.hostname.c_str(), outcome.passed);
  }
}

// The task's view, when a plugin before ddp.so moved it into a container's mount namespace (pyxis does, in its
// task_init); null in the node's own view.
std::optional<ddp::ContainerView> container_view() {
  const auto& node_view = state().node_view;
  const ino_t here = ddp::this_mount_namespace();
  if (!node_view || here == 0 || here == node_view->namespace_id) return std::nullopt;
  return ddp::ContainerView{node_view->devices, ddp::container_kind(ddp::ContainerRuntime::Pyxis).mount};
}

// pyxis's options, in use while the task is still in the node's view: pyxis comes after ddp.so in plugstack.conf
// and will import its container's environment over the contract. spank_option_getopt finds any plugin's option
// by name (the stack's option cache); the probes are static, since Slurm may keep a pointer to them.
std::optional<std::string> later_container_option(spank_t sp) {
  static spank_option probes[] = {
      {const_cast<char*>("container-image"), nullptr, nullptr, 1, 0, nullptr},
      {const_cast<char*>("container-name"), nullptr, nullptr, 1, 0, nullptr},
  };
  for (spank_option& probe : probes) {
    char* value = nullptr;
    if (spank_option_getopt(sp, &probe, &value) == ESPANK_SUCCESS) return std::string("--") + probe.name;
  }
  for (const char* name : {"PYXIS_CONTAINER_IMAGE", "PYXIS_CONTAINER_NAME"}) {
    if (get_env(sp, name)) return std::string(name);
  }
  return std::nullopt;
}

void refuse_container_plugin_after_ddp(spank_t sp) {
  const auto option = later_container_option(sp);
  if (!option) return;
  throw ddp::Error(
      *option +
      " is handled by a container plugin that plugstack.conf lists after ddp.so (pyxis): it would import its "
      "container's environment over the MASTER_ADDR, MASTER_PORT, WORLD_SIZE and ranks ddp.so set (enroot's pytorch "
      "hook puts MASTER_PORT=SLURM_JOB_ID%4536+61000 there, one port for every step of the job), so the step was "
      "not started; list ddp.so after pyxis in plugstack.conf (install-head-node.sh writes "
      "plugstack.conf.d/zz-ddp.conf, which sorts after pyxis.conf)");
}

// In the task's process, as the user: a hung file system costs this task the deadline, not slurmstepd its life.
void prepare_snapshot_dir(const ddp::StepPlan& plan, const ddp::EnvLookup& user_env,
                          const ddp::ContainerView* container) {
  const auto dir = ddp::snapshot_dir_to_prepare(plan, user_env);
  if (!dir) return;
  try {
    ddp::prepare_snapshot_dir(*dir, "--ddp-snapshot-dir", plan.snapshot_dir_timeout, container);
  } catch (const ddp::Error& e) {
    throw ddp::Error(std::string(e.what()) + " (on " + plan.step.hostname + ")");
  }
}

int export_task_env(spank_t sp) {
  const ddp::StepPlan& plan = *state().plan;
  const ddp::TaskInfo task = read_task(sp);
  const ddp::EnvLookup user_env = [sp](const std::string& name) { return get_env(sp, name.c_str()); };
  const std::optional<ddp::ContainerView> container = container_view();
  const ddp::ContainerView* in_container = container ? &*container : nullptr;
  prepare_snapshot_dir(plan, user_env, in_container);
  ddp::TaskEnv env = ddp::task_env(plan, task, user_env);
  prepare_failure_reporting(plan, task, env, in_container);
  ddp::TaskBinding binding = ddp::bind_task(*state().node, plan, task, env);
  if (container) binding.summary += " view=container";
  if (plan.check) check_this_node(plan, task, env);
  // After Slurm's own affinity step, within what it allowed (apply_cpu_binding intersects with it). Exported too:
  // a container runtime that resets the affinity of the process it starts (runc since 1.2) loses it, and the
  // program applies it again (container.hpp: restore_cpu_binding).
  if (!binding.cpus.empty()) {
    env.set(ddp::kCpuBindVariable, ddp::format_id_list(ddp::apply_cpu_binding(0, binding.cpus)));
  }
  for (const auto& [name, value] : ddp::task_exports(env, plan.cleanenv)) {
    if (spank_setenv(sp, name.c_str(), value.c_str(), 1) != ESPANK_SUCCESS) {
      throw ddp::Error("cannot set " + name + " in the task's environment");
    }
  }
  if (plan.verbose) std::fprintf(stderr, "%s\n", ddp::verbose_line(plan, task, env, binding.summary).c_str());
  return 0;
}

}  // namespace

extern "C" int ddp_spank_user_init(spank_t sp, int, char**) {
  return guarded([&] {
    uint32_t step_id = 0;
    if (!is_ddp_step(sp, &step_id) || state().failure) return 0;
    remember_node_view();
    plan_this_node(sp, step_id);
    return 0;
  });
}

extern "C" int ddp_spank_task_init(spank_t sp, int, char**) {
  return guarded([&] {
    uint32_t step_id = 0;
    if (!is_ddp_step(sp, &step_id)) return 0;
    if (state().failure) fail_task(sp);
    try {
      if (!container_view()) refuse_container_plugin_after_ddp(sp);
    } catch (const std::exception& e) {
      record_failure(e.what(), false);
      fail_task(sp);
    }
    try {
      return export_task_env(sp);
    } catch (const std::exception& e) {
      record_failure(e.what(), true);
    }
    fail_task(sp);
  });
}
