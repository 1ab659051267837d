#pragma once
// A c10d process group over MPI (Debian's LibTorch is built without ProcessGroupMPI): all-reduce (sum, average,
// product, min, max; bitwise ops on integers), broadcast, all-gather and barrier on CPU tensors of float, double,
// half, bfloat16 and the integer types, spanning MPI_COMM_WORLD.
//
// Design: every collective is queued to one MPI thread (mpi_bootstrap.hpp), which runs them in order with
// OpenMPI's blocking collectives and completes each call's Work and future. The caller returns at once, so the
// Reducer keeps overlapping all-reduce with backward. Not non-blocking collectives: OpenMPI 4.1 advances them
// only inside MPI calls, so something would have to poll anyway, and its non-blocking all-reduce measured 2x
// slower than the blocking one here (1.0 vs 0.45 us for 84 B, 3.9 vs 1.7 ms for 8 MB, 2 ranks, shared memory).
// Collectives of all ranks must be issued in the same order, as c10d requires of every backend.
#include <chrono>

#include "core/launch.hpp"
#include "ddp_runtime/common/c10d_compat.hpp"

namespace ddp::runtime {

// Initialises MPI once and returns a group of MPI_COMM_WORLD. Throws ddp::Error for a task of srun without
// --mpi=pmix (launch.srun_without_pmix), when MPI's rank or size differs from the launcher's, or where MPI was not
// built in. A collective that has not completed after `timeout` aborts the job.
compat::ProcessGroupPtr make_mpi_group(const Launch& launch, std::chrono::milliseconds timeout);

}  // namespace ddp::runtime
