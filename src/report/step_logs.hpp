#pragma once
// Where a --ddp step keeps what its tasks say when they fail, as torchrun does for its workers: each task's
// TORCHELASTIC_ERROR_FILE (PyTorch's @record and ddp-train write the exception there, in JSON) and PyTorch's NCCL
// flight-recorder dumps, in one directory per step:
//   <log base>/<job id>.<step id>/error-rank<R>-<host>.json
//   <log base>/<job id>.<step id>/nccl-<host>-rank<R>        (PyTorch appends the rank to the dump prefix)
// The log base is DDP_LOG_DIR of the job's environment, else ~/.cache/slurm-ddp of the job's user: home directories
// are shared on almost every cluster, so ddp-why and ddp-restart read every node's reports in one place.
// PyTorch writes there by path, following links, so the base and the step's directory follow the snapshot
// directory's rules (snapshot_dir.hpp: the user's alone, no link as last component, parents only root or the user
// control, walked with openat): nobody else can plant a link named like a report, or a report of their own.
// srun, as the user, makes the step's directory ready before its tasks start (removing what an earlier attempt of
// the same <job id>.<step id> left: a requeued job, or a new cluster whose job ids start again at 1), and at exit
// removes it when empty, or names the first failure. Each task checks it again before exec. Every access to the
// directory from srun or a task runs in a child process with a deadline (child_process.hpp): a hung file system
// costs a warning, never a process stuck in it. Nothing here runs in slurmstepd itself.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "core/env_names.hpp"
#include "core/snapshot_dir.hpp"
#include "report/failure_report.hpp"

namespace ddp {

constexpr const char* kLogDirVariable = vars::kLogDir;

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

// The snapshot directory's rules, worded for the log directory; `create`: as DirRules::create.
DirRules log_dir_rules(bool create);

// <base>/<run id> opened under the rules, the base included (it must be the user's alone too). With `create`,
// what is missing is made mode 0700; without, a missing directory gives an empty UniqueFd. Throws ddp::Error.
UniqueFd open_step_log_dir(const std::string& base, const std::string& run_id, bool create);

// In the task's process, as the user, before exec: the step's directory made and checked under the rules, in a
// child that must answer within `deadline`. Throws ddp::Error naming the directory and the fix.
void prepare_step_log_dir(const std::string& base, const std::string& run_id, std::chrono::milliseconds deadline);

// srun, before its tasks start (as the user): the step's directory made under the rules and emptied of the reports
// and dumps an earlier attempt of the same step id left, and the flight-recorder dumps of the job's earlier steps
// removed (each dump is megabytes per rank: a few attempts of a large job would fill a home directory's quota).
// Returns how many files it removed. Throws ddp::Error.
size_t start_step_log_dir(const std::string& base, const std::string& run_id);

// srun, after its tasks ended: nullopt when the step left no report (its directory is then removed), else one line
// naming the first failure (printable text only) or, without a readable report, where the reports are.
std::optional<std::string> finish_step_log_dir(const std::string& base, const std::string& run_id,
                                               const ReportLimits& limits = {});

}  // namespace ddp
