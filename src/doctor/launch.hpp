#pragma once
// Who this process is in the run, from the launcher's environment:
//   torchrun's variables (srun --ddp, torchrun, or a test): RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT
//   OpenMPI's mpirun: OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK (MASTER_ADDR/MASTER_PORT optional)
//   neither: this process alone.
#include <cstdint>
#include <optional>
#include <string>

#include "doctor/doctor_options.hpp"
#include "task_env.hpp"

namespace ddp::doctor {

enum class LaunchKind { Single, Env, Mpi };

struct Launch {
  LaunchKind kind = LaunchKind::Single;
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr;              // empty: unknown
  std::optional<uint16_t> master_port;
  std::string session;                  // the run's id (TORCHELASTIC_RUN_ID); empty outside srun --ddp/torchrun
  bool nccl_backend = false;            // DDP_BACKEND=nccl: every rank needs a GPU
};

// Options override the environment. Throws ddp::Error naming the variable and the fix.
Launch detect_launch(const EnvLookup& env, const DoctorOptions& options);

}  // namespace ddp::doctor
