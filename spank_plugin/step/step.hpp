#pragma once
// What the plugin knows about one job step on one node, as plain values. The SPANK adapter fills it
// from Slurm items and the step's environment; everything below works from it alone.
#include <cstdint>
#include <string>

namespace ddp {

struct StepInfo {
  uint32_t job_id = 0;
  uint32_t step_id = 0;
  uint32_t num_nodes = 0;    // nodes of the step (of all components of a heterogeneous step)
  uint32_t num_tasks = 0;    // tasks of the step, all nodes (of all components of a heterogeneous step)
  uint32_t local_tasks = 0;  // tasks of the step on this node
  uint32_t cpus_per_task = 1;
  uint32_t restart_count = 0;  // Slurm's requeue count plus ddp-restart's attempt (DDP_RESTART_ATTEMPT)
  uint32_t max_restarts = 0;   // restarts the job script allows (DDP_MAX_RESTARTS), 0 when unset
  std::string node_list;       // SLURM_STEP_NODELIST
  std::string reserved_ports;  // SLURM_STEP_RESV_PORTS, empty when the cluster reserves none
  std::string job_key;         // DDP_JOB_KEY (ports.hpp), empty when srun made none
  std::string job_instance;    // DDP_JOB_INSTANCE (ports.hpp), empty when the job has none
  std::string hostname;        // this node, for messages
  std::string user;            // the job's user name, for %u
  std::string home;            // the job's user's home directory (passwd), for the default log directory
  std::string job_name;        // SLURM_JOB_NAME, for %x
};

struct TaskInfo {
  uint32_t rank = 0;        // global rank, het-job offset included (SLURM_PROCID)
  uint32_t local_rank = 0;  // index among this node's tasks (S_TASK_ID)
  uint32_t node_rank = 0;   // this node's index in the step, het-job offset included (SLURM_NODEID)
};

// Batch, extern, interactive and pending steps carry Slurm's reserved ids: --ddp exports nothing there,
// so its values never leak from the batch script's environment into later steps.
bool is_application_step(uint32_t step_id);

// Checks the relations Slurm guarantees, so a surprise from a future Slurm is an error and not a wrong rank.
void validate(const StepInfo& step);
void validate(const StepInfo& step, const TaskInfo& task);

}  // namespace ddp
