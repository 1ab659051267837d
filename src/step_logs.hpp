#pragma once
// Where a --ddp step keeps what its tasks say when they fail, as torchrun does for its workers: each task's
// TORCHELASTIC_ERROR_FILE (PyTorch's @record and ddp-train write the exception there, in JSON) and PyTorch's NCCL
// flight-recorder dumps, in one directory per step:
//   <log base>/<job id>.<step id>/error-rank<R>-<host>.json
//   <log base>/<job id>.<step id>/nccl-<host>-rank<R>        (PyTorch appends the rank to the dump prefix)
// The log base is DDP_LOG_DIR of the job's environment, else ~/.cache/slurm-ddp of the job's user: home directories
// are shared on almost every cluster, so ddp-why and ddp-restart read every node's reports in one place.
// Each task creates the directory as the user, before exec (never slurmstepd); srun removes it at exit when it is
// empty. A task that ends well writes nothing there, so only failed steps keep their directory.
#include <cstdint>
#include <optional>
#include <string>

#include "task_env.hpp"

namespace ddp {

constexpr const char* kLogDirVariable = "DDP_LOG_DIR";

// The log base: `ddp_log_dir` (DDP_LOG_DIR) when set, else <home>/.cache/slurm-ddp. Throws ddp::Error for a
// DDP_LOG_DIR that is not an absolute path; nullopt when neither is known (no home directory).
std::optional<std::string> log_base(const std::optional<std::string>& ddp_log_dir, const std::string& home);

// The log base as srun and ddp-why find it: DDP_LOG_DIR of this process's environment, else the home directory of
// the calling user (getuid); they run as the job's user, in its environment. Throws as log_base does.
std::optional<std::string> own_log_base();

// <base>/<run id>, the run id being TORCHELASTIC_RUN_ID (<job id>.<step id>).
std::string step_log_dir(const std::string& base, const std::string& run_id);

// File names inside the step's directory. Host names keep [A-Za-z0-9._-]; anything else becomes '_'.
std::string error_file_name(uint32_t rank, const std::string& host);
std::string nccl_dump_prefix(const std::string& host);

// Per task: TORCHELASTIC_ERROR_FILE and TORCH_NCCL_DEBUG_INFO_TEMP_FILE in `step_dir` when it is usable, and always
// PyTorch's watchdog and flight-recorder settings (TORCH_NCCL_ASYNC_ERROR_HANDLING, TORCH_NCCL_DUMP_ON_TIMEOUT,
// TORCH_NCCL_TRACE_BUFFER_SIZE), each unless the user set it. TORCHELASTIC_ERROR_FILE belongs to the contract and
// replaces an outer launcher's stale value.
void add_failure_reporting(TaskEnv& env, const std::optional<std::string>& step_dir, uint32_t rank,
                           const std::string& host);

// In the task's process, as the user: creates `step_dir` and its missing parents (mode 0700) and removes this
// task's own reports left by an earlier step of the same id (job ids restart when a cluster is rebuilt). Throws
// ddp::Error naming the directory and the fix.
void prepare_step_log_dir(const std::string& step_dir, uint32_t rank, const std::string& host);

// srun, at exit: removes the step's directory when it holds nothing; true when reports are left in it.
bool remove_step_log_dir_if_empty(const std::string& step_dir);

}  // namespace ddp
