#pragma once
// The exchange under `mpirun -np N ddp-doctor`: MPI point-to-point messages between rank 0 and the others,
// polled against the same deadlines as the TCP exchange so that a stuck rank cannot hang the run.
#include <memory>

#include "doctor/transport.hpp"

namespace ddp::doctor {

// Calls MPI_Init; the transport's destructor calls MPI_Finalize, or MPI_Abort (ending every rank) after a peer
// missed a deadline: print the report before destroying it. Throws ExchangeError when MPI cannot start.
std::unique_ptr<Transport> open_mpi_exchange(int* argc, char*** argv);

}  // namespace ddp::doctor
