// After the options are parsed. srun, sbatch and salloc refuse a --ddp request that cannot run, before anything
// is allocated or launched, and give a new --ddp job its key (ports.hpp); srun makes a task's failure end a --ddp
// step and warns about a --container bundle it cannot see. slurmstepd, still root here, fills the node's topology
// cache for this and later steps.
#include <slurm/slurm.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <optional>
#include <string>

#include "base/parse.hpp"
#include "core/env_names.hpp"
#include "core/error.hpp"
#include "dispatch.h"
#include "plugin_state.hpp"
#include "slurm_versions.h"
#include "spank_plugin/step/node_setup.hpp"
#include "spank_plugin/step/ports.hpp"
#include "spank_plugin/step/step.hpp"
#include "topology/topology_cache.hpp"

using namespace ddp::spank;

namespace {

// srun ends a step at a task's bad exit when --kill-on-bad-exit says so, else when slurm.conf's KillOnBadExit does
// (_kill_on_bad_exit in srun's launch code, 22.05 to 25.x; 25.11 also reads it for the step's SSF_KILL_ON_BAD_EXIT
// when the step is created, after this callback). A --ddp step's default goes into srun's own copy of KillOnBadExit,
// so the user's --kill-on-bad-exit or SLURM_KILL_BAD_EXIT still wins; no other process or step sees it.
// Only into a configuration of our own layout, whose field holds what Slurm puts there (0 or 1): otherwise the step
// keeps Slurm's default, and srun says how to get the --ddp one.
void set_kill_on_bad_exit(spank_t sp) {
  const auto kill = ddp::kill_on_bad_exit(state().options);
  if (!kill) return;
  std::string why_not;
  slurm_conf_t* conf = this_slurm_conf(sp, &why_not);
  if (conf != nullptr && conf->kill_on_bad_exit > 1) why_not = "its KillOnBadExit field holds an unknown value";
  if (conf == nullptr || !why_not.empty()) {
    log_error("note: a failed task will not end this step (" + why_not + "); add --kill-on-bad-exit=1");
    return;
  }
  conf->kill_on_bad_exit = *kill ? 1 : 0;
}

void fill_topology_cache(spank_t sp) {
  uint32_t step_id = 0;
  if (spank_get_item(sp, S_JOB_STEPID, &step_id) != ESPANK_SUCCESS || !ddp::is_application_step(step_id)) return;
  const auto dir = ddp::topology_cache_to_fill(state().options, state().config);
  if (!dir) return;
  try {
    ddp::ensure_topology_cache(*dir);
  } catch (const std::exception& e) {
    slurm_debug("ddp: no topology cache, each step probes the system: %s", e.what());
  }
}

// The environment srun, sbatch and salloc hand to the job is their own, copied after this callback: a key and an
// instance put there reach every step, and a requeued batch job starts with them again. An srun inside an allocation
// keeps the allocation's, so the job's steps share them. Each travels twice: under its own name for the tasks, and
// under the name of the job control environment (the carrier), which --export=NONE and SLURM_EXPORT_ENV=NONE keep
// (see ports.hpp). An srun inside an allocation made without --ddp makes a key of its own (its step's) but no
// instance: one made there would name the step, not the job, and a restarted step would not find its run.
void give_job_identity() {
  const bool new_job = spank_context() != S_CTX_LOCAL || getenv("SLURM_JOB_ID") == nullptr;
  // The allocation's value of a variable (carrier first), when it is well formed.
  const auto inherited = [new_job](const char* carrier, const char* variable, bool (*valid)(std::string_view)) {
    std::optional<std::string> value;
    for (const char* name : {carrier, variable}) {
      const char* existing = getenv(name);
      if (!value && !new_job && existing != nullptr && valid(existing)) value = existing;
    }
    return value;
  };
  const auto give = [](const char* carrier, const char* variable, const std::string& value) {
    setenv(variable, value.c_str(), 1);
    setenv(carrier, value.c_str(), 1);
  };
  const auto key = inherited(ddp::kJobKeyCarrier, ddp::kJobKeyVariable, ddp::is_job_key);
  give(ddp::kJobKeyCarrier, ddp::kJobKeyVariable, key ? *key : ddp::new_job_key());
  auto instance = inherited(ddp::kJobInstanceCarrier, ddp::kJobInstanceVariable, ddp::is_job_instance);
  if (!instance && new_job) instance = ddp::new_job_instance();
  if (instance) give(ddp::kJobInstanceCarrier, ddp::kJobInstanceVariable, *instance);
}

// The admin's remember_bad_nodes=no reaches ddp-restart in the job's batch script the way the job's key does: in the
// environment sbatch hands the job, under its own name and its job-control name (which --export=NONE keeps).
void give_restart_settings() {
  if (state().config.remember_bad_nodes) return;
  setenv(ddp::vars::kRememberBadNodes, "0", 1);
  setenv(ddp::vars::kRememberBadNodesCarrier, "0", 1);
}

// srun, sbatch or salloc refuses the request. Slurm ignores a failing callback of a plugin that plugstack.conf
// loads as "optional", so the refusal ends the process itself (as Slurm's own "post-option processing failed"
// does for a required plugin): the request never runs without what it asked for.
[[noreturn]] void refuse(const std::string& message) {
  log_error(message);
  exit(1);
}

// srun --container=BUNDLE (srun puts it in SLURM_CONTAINER before this callback) on a Slurm that writes the
// container's environment before task_init (slurm_versions.h): the step could not get the contract.
void refuse_container_without_task_env() {
#if !DDP_SLURM_CONTAINER_TAKES_TASK_ENV
  const char* bundle = getenv("SLURM_CONTAINER");
  if (bundle == nullptr || *bundle == '\0') return;
  char series[16];
  std::snprintf(series, sizeof series, "%d.%02d", SLURM_VERSION_MAJOR(SLURM_VERSION_NUMBER),
                SLURM_VERSION_MINOR(SLURM_VERSION_NUMBER));
  refuse(std::string("--container on Slurm ") + series +
         " writes the container's environment before any task starts, so RANK, LOCAL_RANK and the rest of "
         "what srun --ddp sets per task cannot reach it (Slurm 23.02 and later pass them); start the "
         "tasks with ch-run, apptainer or pyxis instead, or leave out --ddp");
#endif
}

// srun --container=BUNDLE (srun puts it in SLURM_CONTAINER before this callback): a bundle the nodes do not have
// fails every task's launch with Slurm's "Unspecified error", its reason only in slurmd's log. srun cannot know the
// nodes' view (a bundle may be node-local), so a bundle missing here is a warning, not a refusal.
void warn_missing_bundle() {
  const char* bundle = getenv("SLURM_CONTAINER");
  if (bundle == nullptr || *bundle == '\0') return;
  struct stat info = {};
  if (stat(bundle, &info) == 0 && S_ISDIR(info.st_mode)) return;
  fprintf(stderr,
          "ddp: warning: --container=%s is not a directory on this host: where the nodes lack it too, every task's "
          "launch fails (\"Unspecified error\"); give an OCI bundle directory (config.json and its root file system)\n",
          ddp::printable(bundle, 300).c_str());
}

}  // namespace

extern "C" int ddp_spank_init_post_opt(spank_t sp, int, char**) {
  return guarded([&] {
    if (spank_remote(sp)) {
      if (!state().failure && geteuid() == 0) fill_topology_cache(sp);
      return 0;
    }
    if (!state().options.enabled) return 0;
    if (state().failure) refuse(state().failure->message);
    give_job_identity();
    give_restart_settings();
    if (spank_context() == S_CTX_LOCAL) {
      set_kill_on_bad_exit(sp);
      refuse_container_without_task_env();
      warn_missing_bundle();
    }
    return 0;
  });
}
