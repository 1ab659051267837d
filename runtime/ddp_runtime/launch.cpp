#include "ddp_runtime/launch.hpp"

#include <charconv>
#include <cstdlib>

#include "error.hpp"
#include "ports.hpp"

namespace ddp::runtime {
namespace {

int parse_int(const EnvLookup& env, const std::string& name, const std::string& fix) {
  const std::string text = env(name).value_or("");
  int value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || value < 0) {
    throw Error(name + "='" + text + "' is not a whole number; " + fix);
  }
  return value;
}

std::optional<int> parse_optional_int(const EnvLookup& env, const std::string& name, const std::string& fix) {
  if (!env(name)) return std::nullopt;
  return parse_int(env, name, fix);
}

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> parts;
  std::string part;
  for (char c : text + ',') {
    if (c != ',') {
      part += c;
    } else if (!part.empty()) {
      parts.push_back(part);
      part.clear();
    }
  }
  return parts;
}

void check_rank(const Launch& launch, const std::string& rank_var, const std::string& size_var) {
  if (launch.world_size < 1) throw Error(size_var + "=0: a job needs at least one process");
  if (launch.rank >= launch.world_size) {
    throw Error(rank_var + "=" + std::to_string(launch.rank) + " is not below " + size_var + "=" +
                std::to_string(launch.world_size) + "; ranks count from 0 to " + size_var + "-1");
  }
  if (launch.local_rank >= launch.local_world_size) {
    throw Error("local rank " + std::to_string(launch.local_rank) + " is not below the local world size " +
                std::to_string(launch.local_world_size) + "; check the launcher's LOCAL_RANK/LOCAL_WORLD_SIZE");
  }
}

void read_master(Launch& launch, const EnvLookup& env, bool required) {
  launch.master_addr = env("MASTER_ADDR").value_or("");
  const bool have_port = env("MASTER_PORT").has_value();
  if (required && (launch.master_addr.empty() || !have_port)) {
    throw Error("RANK and WORLD_SIZE are set but MASTER_ADDR or MASTER_PORT is not; export both (srun --ddp "
                "and torchrun do), or unset RANK to run a single process");
  }
  if (!have_port) return;
  launch.master_port = parse_int(env, "MASTER_PORT", "set MASTER_PORT to a free TCP port, e.g. 29500");
  if (launch.master_port < 1 || launch.master_port > 65535) {
    throw Error("MASTER_PORT=" + std::to_string(launch.master_port) + " is not a TCP port; use 1-65535, e.g. 29500");
  }
}

void read_torchrun(Launch& launch, const EnvLookup& env) {
  const std::string fix = "the launcher (srun --ddp, torchrun) sets it; unset RANK to run a single process";
  launch.source = LaunchSource::Torchrun;
  launch.rank = parse_int(env, "RANK", fix);
  launch.world_size = parse_int(env, "WORLD_SIZE", fix);
  launch.local_rank = parse_optional_int(env, "LOCAL_RANK", fix).value_or(0);
  launch.local_world_size = parse_optional_int(env, "LOCAL_WORLD_SIZE", fix).value_or(launch.local_rank + 1);
  check_rank(launch, "RANK", "WORLD_SIZE");
  read_master(launch, env, launch.world_size > 1);
}

void read_openmpi(Launch& launch, const EnvLookup& env) {
  const std::string fix = "mpirun sets it; do not export OMPI_COMM_WORLD_* by hand";
  launch.source = LaunchSource::OpenMpi;
  launch.rank = parse_int(env, "OMPI_COMM_WORLD_RANK", fix);
  launch.world_size = parse_int(env, "OMPI_COMM_WORLD_SIZE", fix);
  launch.local_rank = parse_optional_int(env, "OMPI_COMM_WORLD_LOCAL_RANK", fix).value_or(0);
  launch.local_world_size =
      parse_optional_int(env, "OMPI_COMM_WORLD_LOCAL_SIZE", fix).value_or(launch.local_rank + 1);
  check_rank(launch, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE");
  read_master(launch, env, false);
}

// OpenMP accepts lists such as "4,2" (one count per nesting level); the first is the one that matters here.
std::optional<int> leading_thread_count(const std::string& text) {
  int value = 0;
  std::from_chars(text.data(), text.data() + text.size(), value);
  if (value < 1) return std::nullopt;
  return value;
}

// srun without --ddp starts every task as a lone trainer; that is never what was meant.
void refuse_bare_srun(const EnvLookup& env) {
  const auto tasks = env("SLURM_STEP_NUM_TASKS");
  if (tasks && *tasks != "1" && env("SLURM_PROCID")) {
    throw Error("SLURM_STEP_NUM_TASKS=" + *tasks + " but RANK is not set: launch with srun --ddp (or export RANK, "
                "WORLD_SIZE, MASTER_ADDR and MASTER_PORT)");
  }
}

}  // namespace

EnvLookup process_environment() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

Launch launch_from_environment(const EnvLookup& env) {
  Launch launch;
  if (env("RANK") || env("WORLD_SIZE")) {
    read_torchrun(launch, env);
  } else if (env("OMPI_COMM_WORLD_RANK")) {
    read_openmpi(launch, env);
  } else {
    refuse_bare_srun(env);
  }
  launch.socket_ifnames = split_commas(env("GLOO_SOCKET_IFNAME").value_or(""));
  if (auto hint = env("DDP_BACKEND")) launch.backend = parse_backend(*hint, "DDP_BACKEND");
  launch.restart_count = parse_optional_int(env, "TORCHELASTIC_RESTART_COUNT", "the restart loop sets it").value_or(0);
  launch.run_label = env("TORCHELASTIC_RUN_ID").value_or("");
  if (const auto key = env(ddp::kJobKeyVariable); key && ddp::is_job_key(*key)) launch.job_key = *key;
  launch.omp_num_threads = leading_thread_count(env("OMP_NUM_THREADS").value_or(""));
  return launch;
}

BackendHint parse_backend(const std::string& text, const std::string& where) {
  if (text == "auto") return BackendHint::Auto;
  if (text == "gloo") return BackendHint::Gloo;
  if (text == "nccl") return BackendHint::Nccl;
  if (text == "mpi") return BackendHint::Mpi;
  throw Error(where + "='" + text + "' is not a backend; use auto, gloo, nccl or mpi");
}

const char* to_string(BackendHint backend) {
  switch (backend) {
    case BackendHint::Auto: return "auto";
    case BackendHint::Gloo: return "gloo";
    case BackendHint::Nccl: return "nccl";
    case BackendHint::Mpi: return "mpi";
  }
  return "?";
}

const char* to_string(LaunchSource source) {
  switch (source) {
    case LaunchSource::Torchrun: return "torchrun environment";
    case LaunchSource::OpenMpi: return "mpirun";
    case LaunchSource::SingleProcess: return "single process";
  }
  return "?";
}

}  // namespace ddp::runtime
