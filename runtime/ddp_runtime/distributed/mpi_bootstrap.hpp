#pragma once
// MPI in this process: initialised once (MPI_THREAD_SERIALIZED), by whichever needs it first: sharing rank 0's
// address under mpirun for its store, or the MPI process group. The MPI group makes every MPI call on one
// thread, the MPI thread below; a watchdog ends the job when one call outlives the timeout (MPI has none of its
// own). Plain C++: no LibTorch here.
#include <chrono>
#include <cstdint>
#include <functional>

#include "core/launch.hpp"

namespace ddp::runtime {

// Under mpirun without MASTER_ADDR (OpenMPI exports only its own variables): rank 0's launch.master_addr (its
// advertised_address) and launch.master_port (where its store already listens) to every rank, over MPI, so
// that the rendezvous needs nothing from the user.
void share_master_over_mpi(Launch& launch);

struct MpiWorld {
  int rank = 0;
  int size = 1;
};

// MPI_COMM_WORLD's rank and size. Throws ddp::Error where MPI was not built in, or where it cannot serve calls
// from a thread other than main.
MpiWorld init_mpi();

// What a call does, for the watchdog's message.
struct MpiCallInfo {
  const char* operation = "";
  std::int64_t bytes = 0;
};

// Starts the MPI thread (once): from then on only it calls MPI, and abort_mpi_job aborts the job. Every rank calls
// it: the ranks first exchange who they are (one MPI_Allgather) to watch their peers on the same node.
void start_mpi_thread();

// Runs `call` on the MPI thread after every call posted before it. When one call has not returned after `timeout` (a
// peer died, stopped, or never made its matching call), or a peer on this node has ended while it waits (seen at
// once: base/peer_watch.hpp), the watchdog prints which call on which rank and aborts the job with MPI_Abort.
void post_mpi_call(std::function<void()> call, MpiCallInfo info, int rank, std::chrono::milliseconds timeout);

// Lets the MPI thread run what was posted, joins it, and calls MPI_Finalize; a successful run calls it once at the
// end. A failed rank exits without it: mpirun then ends the job.
void finalize_mpi();

// After a fatal error on a rank of an MPI-group job: MPI_Abort, so that mpirun or srun ends every rank instead
// of leaving the others blocked in their next collective. Does nothing before start_mpi_thread().
void abort_mpi_job(int status);

}  // namespace ddp::runtime
