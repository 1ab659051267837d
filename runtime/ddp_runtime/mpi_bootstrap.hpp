#pragma once
// Under mpirun without MASTER_ADDR (OpenMPI exports only its own variables), rank 0 shares its address and a
// free port over MPI, so that the TCPStore rendezvous needs nothing from the user.
#include "ddp_runtime/launch.hpp"

namespace ddp::runtime {

// Fills launch.master_addr and launch.master_port. MPI is initialised once and stays initialised until
// finalize_mpi(), which a successful run calls; a failed rank exits without it, so that mpirun ends the job.
void share_master_over_mpi(Launch& launch);
void finalize_mpi();

}  // namespace ddp::runtime
