#pragma once
// Under `mpirun -np N ddp-doctor` without MASTER_ADDR and MASTER_PORT: MPI only tells every rank where rank 0's
// store is, and is finished at once; the run then goes on over the store as under srun.
#include "launch.hpp"

namespace ddp::doctor {

// Rank 0's address (advertised_address) and launch.master_port, the port its store listens on, broadcast over
// MPI into every rank's `launch`. Throws ExchangeError when MPI cannot start.
void share_master_over_mpi(Launch& launch);

}  // namespace ddp::doctor
