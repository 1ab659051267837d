// The step's failure reports (src/step_logs.hpp). Tasks, before exec and as the user: the log directory and the
// variables that point there. srun: the step's id before launch, and at exit its directory removed when empty, or
// the first failure named when reports are left.
#include <unistd.h>

#include <cstdio>

#include "dispatch.h"
#include "error.hpp"
#include "failure_report.hpp"
#include "mount_view.hpp"
#include "plugin_state.hpp"
#include "step_logs.hpp"

using namespace ddp::spank;

namespace ddp::spank {

void prepare_failure_reporting(const StepPlan& plan, const TaskInfo& task, TaskEnv& env,
                               const ContainerView* container) {
  const auto base = ddp::log_base(env.user_value(ddp::kLogDirVariable), plan.step.home);
  std::optional<std::string> dir;
  if (base) dir = ddp::step_log_dir(*base, env.value("TORCHELASTIC_RUN_ID").value_or(""));
  try {
    if (dir && container != nullptr) {
      ddp::require_node_file_system(*dir, "log directory", container->node_devices, ddp::this_mount_view().mounts,
                                    container->mount_option);
    }
    if (dir) ddp::prepare_step_log_dir(*dir, task.rank, plan.step.hostname);
  } catch (const ddp::Error& e) {
    if (task.local_rank == 0) {
      std::fprintf(stderr, "ddp: warning: no error reports from %s in this step: %s\n", plan.step.hostname.c_str(),
                   e.what());
    }
    dir.reset();
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

// srun's view of the directory the tasks used: the same DDP_LOG_DIR (srun's environment is the tasks') and home.
std::optional<std::string> srun_step_dir() {
  const auto base = ddp::own_log_base();
  if (!base) return std::nullopt;
  return ddp::step_log_dir(*base, launched_run_id());
}

void report_failure(const std::string& dir) {
  const ddp::StepReports reports = ddp::read_step_reports(dir, ddp::ReportLimits{});
  const std::string why = "ddp-why " + launched_run_id();
  if (const auto first = ddp::first_failure(reports, {})) {
    std::fprintf(stderr, "ddp: step %s failed; first failure: %s (%s shows the whole report)\n",
                 launched_run_id().c_str(), ddp::one_line(*first).c_str(), why.c_str());
  } else {
    std::fprintf(stderr, "ddp: step %s failed; its reports are in %s (%s)\n", launched_run_id().c_str(), dir.c_str(),
                 why.c_str());
  }
}

}  // namespace

extern "C" int ddp_spank_local_user_init(spank_t sp, int, char**) {
  return guarded([&] {
    uint32_t job_id = 0;
    uint32_t step_id = 0;
    if (!state().options.enabled || spank_get_item(sp, S_JOB_ID, &job_id) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_JOB_STEPID, &step_id) != ESPANK_SUCCESS || !ddp::is_application_step(step_id)) {
      return 0;
    }
    launched_run_id() = std::to_string(job_id) + "." + std::to_string(step_id);
    return 0;
  });
}

// srun only, once every task has ended. A failure here must not change srun's exit status: it is only reported.
extern "C" int ddp_spank_exit(spank_t, int, char**) {
  if (spank_context() != S_CTX_LOCAL || launched_run_id().empty()) return 0;
  try {
    const auto dir = srun_step_dir();
    if (dir && ddp::remove_step_log_dir_if_empty(*dir)) report_failure(*dir);
  } catch (const std::exception& e) {
    log_error(std::string("cannot read the step's failure reports: ") + e.what());
  }
  return 0;
}
