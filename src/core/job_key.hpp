#pragma once
// The job's key and instance: made once per job by srun, sbatch or salloc, carried to every step (also through a
// requeue), and read by the plugin, ddp-train and ddp-doctor. The key proves a process belongs to the job (the
// project's store, the rendezvous port derived from it); the instance tells two jobs with the same id apart.
#include <cstddef>
#include <string>
#include <string_view>

#include "core/env_names.hpp"

namespace ddp {

// A job's key: 32 hex digits from the kernel's random source. srun, sbatch and salloc make one for a --ddp job
// (DDP_JOB_KEY; an srun inside an allocation keeps the allocation's), so every step of the job sees the same one.
constexpr const char* kJobKeyVariable = vars::kJobKey;
// The same key under the name Slurm gives a plugin's job control variable in a job's environment
// (spank_job_control_setenv("DDP_JOB_KEY") in sbatch and salloc becomes SLURM_SPANK_DDP_JOB_KEY there). --export=NONE,
// SLURM_EXPORT_ENV=NONE and --export=VARS keep every variable whose name starts with SLURM (srun's
// _build_user_env: env_array_merge_slurm in 22.05, env_array_merge_slurm_spank in 23.11 to 26.05; sbatch's
// env_merge_filter likewise), so the key reaches slurmstepd however the user filters the environment.
constexpr const char* kJobKeyCarrier = "SLURM_SPANK_DDP_JOB_KEY";
constexpr std::size_t kJobKeyDigits = 32;
std::string new_job_key();  // throws ddp::Error when the kernel has no random bytes
bool is_job_key(std::string_view text);

// A job's instance: 12 hex digits from the kernel's random source, made with the key when srun, sbatch or salloc
// creates the job and carried the same way (DDP_JOB_INSTANCE, and SLURM_SPANK_DDP_JOB_INSTANCE, which a requeue
// keeps: Slurm starts a requeued job with the environment it was submitted with). Two jobs that share a job id (job
// ids start again at 1 on a rebuilt cluster, and wrap at MaxJobId) have different ones, so ddp-train names its run
// by both and never resumes or prunes the snapshots of another job. Slurm 26.05's unique job id (SLURM_JOB_SLUID)
// would not do: slurmctld gives a requeued job a new one. Too short to pass for key material (redact.hpp): it is no
// secret, file names and messages show it.
constexpr const char* kJobInstanceVariable = vars::kJobInstance;
constexpr const char* kJobInstanceCarrier = "SLURM_SPANK_DDP_JOB_INSTANCE";
constexpr std::size_t kJobInstanceDigits = 12;
std::string new_job_instance();  // throws ddp::Error when the kernel has no random bytes
bool is_job_instance(std::string_view text);

}  // namespace ddp
