#include "core/launch.hpp"

#include "base/parse.hpp"
#include "core/container.hpp"
#include "core/env_names.hpp"
#include "core/error.hpp"
#include "core/job_key.hpp"

namespace ddp {
namespace {

constexpr uint64_t kMaxRanks = 1u << 24;

int whole_number(const EnvLookup& env, const std::string& name, const std::string& fix) {
  const auto text = env(name);
  if (!text) throw Error(name + " is not set; " + fix);
  const auto value = parse_uint(*text, kMaxRanks);
  if (!value) throw Error(name + " " + quote(*text) + " is not a whole number; " + fix);
  return static_cast<int>(*value);
}

std::optional<int> optional_number(const EnvLookup& env, const std::string& name, const std::string& fix) {
  if (!env(name)) return std::nullopt;
  return whole_number(env, name, fix);
}

void read_master(Launch& launch, const EnvLookup& env, bool required) {
  launch.master_addr = env(vars::kMasterAddr).value_or("");
  const auto port = env(vars::kMasterPort);
  if (required && (launch.master_addr.empty() || !port)) {
    throw Error(
        "RANK and WORLD_SIZE are set but MASTER_ADDR or MASTER_PORT is not; export both (srun --ddp and "
        "torchrun do), or unset RANK to run a single process");
  }
  if (port) launch.master_port = static_cast<uint16_t>(require_uint(*port, 1, 65535, vars::kMasterPort));
}

// The variables one launcher names its ranks with, and what to say when one is wrong.
struct RankVariables {
  LaunchSource source;
  const char* rank;
  const char* world_size;
  const char* local_rank;
  const char* local_world_size;
  const char* fix;
};

constexpr RankVariables kTorchrun{
    LaunchSource::Torchrun, vars::kRank,
    vars::kWorldSize,       vars::kLocalRank,
    vars::kLocalWorldSize,  "the launcher (srun --ddp, torchrun) sets it; unset RANK to run a single process"};
constexpr RankVariables kOpenMpi{
    LaunchSource::OpenMpi,        "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",       "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE", "mpirun sets it; do not export OMPI_COMM_WORLD_* by hand"};

void read_ranks(Launch& launch, const EnvLookup& env, const RankVariables& names) {
  launch.source = names.source;
  launch.rank = whole_number(env, names.rank, names.fix);
  launch.world_size = whole_number(env, names.world_size, names.fix);
  launch.local_rank = optional_number(env, names.local_rank, names.fix).value_or(0);
  launch.local_world_size = optional_number(env, names.local_world_size, names.fix).value_or(launch.local_rank + 1);
  const std::string size_var = names.world_size;
  if (launch.world_size < 1) throw Error(size_var + " '0': a run needs at least one process");
  if (launch.rank >= launch.world_size) {
    throw Error(std::string(names.rank) + " '" + std::to_string(launch.rank) + "' is not below " + size_var + " " +
                std::to_string(launch.world_size) + "; ranks count from 0 to " + size_var + "-1");
  }
  if (launch.local_rank >= launch.local_world_size) {
    throw Error("local rank " + std::to_string(launch.local_rank) + " is not below the local world size " +
                std::to_string(launch.local_world_size) + "; check the launcher's " + names.local_rank + " and " +
                names.local_world_size);
  }
}

void refuse_bare_srun(const EnvLookup& env) {
  const auto tasks = env("SLURM_STEP_NUM_TASKS");
  if (tasks && *tasks != "1" && env("SLURM_PROCID")) {
    throw Error("SLURM_STEP_NUM_TASKS=" + quote(*tasks) +
                " but RANK is not set: launch with srun --ddp (or export "
                "RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT)");
  }
}

}  // namespace

std::optional<int> outer_thread_count(const std::string& text) {
  const auto threads = parse_uint(text.substr(0, text.find(',')), 1u << 20);
  if (!threads || *threads == 0) return std::nullopt;
  return static_cast<int>(*threads);
}

Launch launch_from_environment(const EnvLookup& env) {
  // Before anything is read: values a container runtime cleared or a later plugin replaced must not be used.
  check_contract(env);
  Launch launch;
  if (env(vars::kRank) || env(vars::kWorldSize)) {
    read_ranks(launch, env, kTorchrun);
    launch.run_id = env(vars::kRunId).value_or("");
    read_master(launch, env, launch.world_size > 1);
  } else if (env("OMPI_COMM_WORLD_SIZE")) {
    read_ranks(launch, env, kOpenMpi);
    read_master(launch, env, false);
  } else {
    refuse_bare_srun(env);
  }
  if (const auto backend = env(vars::kBackend)) launch.backend = parse_backend(*backend, vars::kBackend);
  launch.restart_count =
      optional_number(env, vars::kRestartCount, "the restart loop (ddp-restart) sets it").value_or(0);
  launch.socket_ifnames = split(env(vars::kGlooSocketIfname).value_or(""), ',');
  if (const auto key = env(kJobKeyVariable); key && is_job_key(*key)) launch.job_key = *key;
  launch.omp_num_threads = outer_thread_count(env(vars::kOmpNumThreads).value_or(""));
  launch.srun_without_pmix = env("SLURM_STEP_ID") && !env("PMIX_RANK") && !env("OMPI_COMM_WORLD_RANK");
  return launch;
}

}  // namespace ddp
