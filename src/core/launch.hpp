#pragma once
// Who this process is in a distributed run, from what its launcher exported; read alike by ddp-train and
// ddp-doctor. One precedence:
//   1. torchrun's variables, when RANK or WORLD_SIZE is set: srun --ddp, torchrun, or set by hand. They come
//      first because they are set for this very process: workers of a torchrun started by mpirun still inherit
//      mpirun's OMPI_COMM_WORLD_* for the torchrun itself.
//   2. OpenMPI's, when OMPI_COMM_WORLD_SIZE is set: mpirun of OpenMPI 4 and 5 (PRRTE sets them too).
//      MASTER_ADDR and MASTER_PORT are optional there: without them rank 0 shares its own over MPI.
//   3. A Slurm step of several tasks with neither (srun without --ddp): refused, since every task would
//      otherwise run alone.
//   4. Anything else: one process on its own.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/backend.hpp"
#include "core/env.hpp"

namespace ddp {

enum class LaunchSource { Torchrun, OpenMpi, SingleProcess };

struct Launch {
  LaunchSource source = LaunchSource::SingleProcess;
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr;                  // MASTER_ADDR; empty: unknown
  uint16_t master_port = 0;                 // MASTER_PORT; 0: unknown
  std::string run_id;                       // TORCHELASTIC_RUN_ID; empty outside srun --ddp and torchrun
  std::string job_key;                      // DDP_JOB_KEY (ports.hpp) when it is one, else empty
  Backend backend = Backend::Auto;          // DDP_BACKEND
  int restart_count = 0;                    // TORCHELASTIC_RESTART_COUNT
  std::vector<std::string> socket_ifnames;  // GLOO_SOCKET_IFNAME, comma separated as PyTorch reads it
  std::optional<int> omp_num_threads;       // the outer level of OMP_NUM_THREADS ("4,2" is 4)
  // A task of a Slurm step (SLURM_STEP_ID) that neither Slurm's PMIx plugin (PMIX_RANK) nor mpirun
  // (OMPI_COMM_WORLD_RANK) started: MPI_Init would have no one to ask for its peers.
  bool srun_without_pmix = false;
};

// Throws ddp::Error naming the variable, its value and the fix: the contract srun --ddp set that did not reach this
// process unchanged (container.hpp: check_contract), a malformed number, a rank outside the world,
// torchrun's variables without MASTER_ADDR and MASTER_PORT, an unknown DDP_BACKEND, srun without --ddp.
Launch launch_from_environment(const EnvLookup& env);

// OMP_NUM_THREADS's outer level: OpenMP takes a list such as "4,2", one count per nesting level, and the outer one
// is what competes for the task's cores. Empty where the text is not a whole number from 1.
std::optional<int> outer_thread_count(const std::string& text);

}  // namespace ddp
