#include "spank_plugin/step/step.hpp"

#include "core/error.hpp"

namespace ddp {

bool is_application_step(uint32_t step_id) {
  // Slurm's special step ids start at SLURM_PENDING_STEP's neighbours: 0xfffffffa (interactive),
  // 0xfffffffb (batch), 0xfffffffc (extern), 0xfffffffd (pending).
  constexpr uint32_t kFirstSpecialStepId = 0xfffffffaU;
  return step_id < kFirstSpecialStepId;
}

void validate(const StepInfo& step) {
  const auto bad = [&](const std::string& what) {
    throw Error("unexpected step " + std::to_string(step.job_id) + "." + std::to_string(step.step_id) +
                " from Slurm: " + what + "; please report this with your srun command line");
  };
  if (step.num_nodes == 0 || step.num_tasks == 0 || step.local_tasks == 0) bad("no nodes or tasks");
  if (step.local_tasks > step.num_tasks) bad("more tasks on this node than in the step");
  if (step.cpus_per_task == 0) bad("zero CPUs per task");
}

void validate(const StepInfo& step, const TaskInfo& task) {
  const auto check = [](uint32_t index, uint32_t count, const std::string& what) {
    if (index >= count) {
      throw Error(what + " " + std::to_string(index) + " of " + std::to_string(count) +
                  " is out of range; please report this with your srun command line");
    }
  };
  check(task.local_rank, step.local_tasks, "local task");
  check(task.rank, step.num_tasks, "rank");
  check(task.node_rank, step.num_nodes, "node index");
}

}  // namespace ddp
