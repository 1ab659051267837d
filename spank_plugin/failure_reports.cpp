// The step's failure reports, the SPANK side; the rules and the file names are src/report/step_logs.hpp's. Tasks,
// before exec and as the user: the log directory checked and the variables that point there. srun, as the user:
// before launch the step's directory made ready for this attempt, at exit removed when empty, or the first failure
// named when reports are left. Every access to the directory runs in a child process with the admin's deadline
// (snapshot_dir_timeout): a hung file system costs a warning.
#include <unistd.h>

#include <cstdio>

#include "base/child_process.hpp"
#include "base/mount_view.hpp"
#include "base/parse.hpp"
#include "core/env_names.hpp"
#include "core/error.hpp"
#include "dispatch.h"
#include "plugin_state.hpp"
#include "report/failure_report.hpp"
#include "report/step_logs.hpp"
#include "spank_plugin/step/step.hpp"

using namespace ddp::spank;

namespace ddp::spank {

void prepare_failure_reporting(const StepPlan& plan, const TaskInfo& task, TaskEnv& env,
                               const ContainerView* container) {
  const auto base = ddp::log_base(env.user_value(ddp::kLogDirVariable), plan.step.home);
  const std::string run_id = env.value(ddp::vars::kRunId).value_or("");
  std::optional<std::string> dir;
  if (base) {
    try {
      if (container != nullptr) {
        ddp::require_node_file_system(ddp::step_log_dir(*base, run_id), "log directory", container->node_devices,
                                      ddp::this_mount_view().mounts, container->mount_option);
      }
      ddp::prepare_step_log_dir(*base, run_id, plan.snapshot_dir_timeout);
      dir = ddp::step_log_dir(*base, run_id);
    } catch (const ddp::Error& e) {
      if (task.local_rank == 0) {
        std::fprintf(stderr, "ddp: warning: no error reports from %s in this step: %s\n", plan.step.hostname.c_str(),
                     e.what());
      }
    }
  }
  ddp::add_failure_reporting(env, dir, task.rank, plan.step.hostname);
}

}  // namespace ddp::spank

namespace {

// The step srun launched, known from local_user_init on; empty before and in other processes.
std::string& launched_run_id() {
  static std::string run_id;
  return run_id;
}

// srun could not make the step's directory ready and said so: at exit there is nothing of this attempt to read.
bool& no_reports() {
  static bool refused = false;
  return refused;
}

// srun's view of the directory the tasks use: the same DDP_LOG_DIR (srun's environment is the tasks') and home.
// In a child process with the admin's deadline; its answer is `body`'s, or the line saying why there is none.
std::string in_log_dir(const std::function<std::string(const std::string& base)>& body) {
  std::optional<std::string> base;
  try {
    base = ddp::own_log_base();
  } catch (const ddp::Error&) {
    base.reset();  // a DDP_LOG_DIR that is no absolute path: the tasks fail the step, naming it
  }
  if (!base) {
    no_reports() = true;
    return "";
  }
  const auto deadline = state().config.snapshot_dir_timeout;
  const ddp::ChildOutcome outcome =
      ddp::run_in_child([&] { return body(*base); }, deadline, 1 << 16, "cannot reach the log directory");
  if (outcome.end == ddp::ChildOutcome::End::Answered) return outcome.answer;
  const std::string dir = ddp::quote(ddp::step_log_dir(*base, launched_run_id()));
  if (outcome.end == ddp::ChildOutcome::End::TimedOut) {
    return "warning: log directory " + dir + " did not answer within " + ddp::seconds_text(deadline) +
           ": its file system hangs here";
  }
  return "warning: log directory " + dir + " could not be read (" + outcome.death + ")";
}

}  // namespace

// srun, once the step exists and before its tasks start.
extern "C" int ddp_spank_local_user_init(spank_t sp, int, char**) {
  return guarded([&] {
    uint32_t job_id = 0;
    uint32_t step_id = 0;
    if (!state().options.enabled || spank_get_item(sp, S_JOB_ID, &job_id) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_JOB_STEPID, &step_id) != ESPANK_SUCCESS || !ddp::is_application_step(step_id)) {
      return 0;
    }
    launched_run_id() = std::to_string(job_id) + "." + std::to_string(step_id);
    const std::string problem = in_log_dir([](const std::string& base) -> std::string {
      try {
        ddp::start_step_log_dir(base, launched_run_id());
      } catch (const std::exception& e) {
        return std::string(
                   "warning: srun cannot make the step's log directory ready (it names no failure at its end): ") +
               e.what();
      }
      return "";
    });
    if (!problem.empty()) {
      std::fprintf(stderr, "ddp: %s\n", problem.c_str());
      no_reports() = true;
    }
    return 0;
  });
}

// srun only, once every task has ended. A failure here must not change srun's exit status: it is only reported.
extern "C" int ddp_spank_exit(spank_t, int, char**) {
  if (spank_context() != S_CTX_LOCAL || launched_run_id().empty() || no_reports()) return 0;
  try {
    const std::string line = in_log_dir([](const std::string& base) -> std::string {
      try {
        return ddp::finish_step_log_dir(base, launched_run_id()).value_or("");
      } catch (const std::exception& e) {
        return std::string("cannot read the step's failure reports: ") + e.what();
      }
    });
    if (!line.empty()) std::fprintf(stderr, "ddp: %s\n", line.c_str());
  } catch (const std::exception& e) {
    log_error(std::string("cannot read the step's failure reports: ") + e.what());
  }
  return 0;
}
