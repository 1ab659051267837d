#pragma once
// Who this process is in the job, read from the environment its launcher set: torchrun's variables (what
// srun --ddp exports), OpenMPI's under mpirun, or nothing (one process). Plain C++: no LibTorch here.
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace ddp::runtime {

enum class BackendHint { Auto, Gloo, Nccl, Mpi };

enum class LaunchSource { Torchrun, OpenMpi, SingleProcess };

struct Launch {
  LaunchSource source = LaunchSource::SingleProcess;
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr;  // empty under mpirun without MASTER_ADDR: rank 0 shares its own over MPI
  int master_port = 0;
  std::vector<std::string> socket_ifnames;  // GLOO_SOCKET_IFNAME, comma separated as in PyTorch
  BackendHint backend = BackendHint::Auto;
  int restart_count = 0;  // TORCHELASTIC_RESTART_COUNT
  std::string run_label;  // TORCHELASTIC_RUN_ID, empty when unset
  std::string job_key;    // DDP_JOB_KEY (ports.hpp) when it is one, else empty
  std::optional<int> omp_num_threads;
};

using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;

EnvLookup process_environment();

// Throws ddp::Error naming the variable, its value and the fix.
Launch launch_from_environment(const EnvLookup& env);

BackendHint parse_backend(const std::string& text, const std::string& where);
const char* to_string(BackendHint backend);
const char* to_string(LaunchSource source);

}  // namespace ddp::runtime
