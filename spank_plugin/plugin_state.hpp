#pragma once
// State shared by the SPANK contexts of one process (srun, sbatch or one step's slurmstepd), and the few
// helpers every context needs. Everything with logic lives in src/.
#include <slurm/slurm.h>
#include <slurm/spank.h>

#include <optional>
#include <string>

#include "base/mount_view.hpp"
#include "core/snapshot_dir.hpp"
#include "spank_plugin/step/node_setup.hpp"
#include "spank_plugin/step/options.hpp"
#include "spank_plugin/step/task_env.hpp"

namespace ddp::spank {

// Why a --ddp step cannot run, and which tasks report it: a step-wide problem is reported once (by the
// step's first task), a problem of this node by this node's first task; every task fails either way.
struct Failure {
  std::string message;
  bool node_specific = false;
};

struct PluginState {
  Options options;
  Config config;
  std::optional<Failure> failure;  // first problem found; --ddp steps fail with it
  std::optional<StepPlan> plan;    // set per node by user_init
  std::optional<NodeSetup> node;   // topology and network of this node, set by user_init
  // The node's view of the file system, seen by user_init in slurmstepd: a task whose mount namespace differs at
  // task_init was moved into a container by a plugin listed before ddp.so. Unset when /proc could not tell.
  std::optional<MountView> node_view;
};

PluginState& state();

void record_failure(std::string message, bool node_specific);
void log_error(const std::string& message);  // one line, "ddp: " prefix

// A variable of the step's (user_init) or task's (task_init) environment; nullopt when unset.
std::optional<std::string> get_env(spank_t sp, const char* name);

// Per task, in the task's process before exec: its error report file and PyTorch's watchdog settings in `env`
// (step_logs.hpp), the step's log directory created as the user. Throws ddp::Error for a bad DDP_LOG_DIR; a
// directory that cannot be created only costs the reports, with a warning. With `container` (the task runs in a
// container's view), a directory that is not mounted into the container is not created there: same warning.
void prepare_failure_reporting(const StepPlan& plan, const TaskInfo& task, TaskEnv& env,
                               const ContainerView* container);

// Slurm's own configuration in this process (srun, sbatch, salloc, slurmstepd), exported by libslurmfull but not
// declared in its public headers; nullptr unless the running Slurm is of the series ddp.so was built for (the layout
// is then ours, slurm_versions.h). `why_not` says why not.
slurm_conf_t* this_slurm_conf(spank_t sp, std::string* why_not = nullptr);

// Runs `body`, turning any exception into a logged error and SPANK's error code, so nothing escapes into
// Slurm's C code.
template <typename Body>
int guarded(Body&& body) noexcept {
  try {
    return body();
  } catch (const std::exception& e) {
    log_error(e.what());
  } catch (...) {
    log_error("internal error");
  }
  return -1;
}

}  // namespace ddp::spank
