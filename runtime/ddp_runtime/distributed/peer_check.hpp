#pragma once
// After a collective failed on this rank: which ranks still answer? A rank that is stopped (SIGSTOP), hung or on a
// dead node makes every other rank's next collective fail at the process group's timeout with an error that does
// not say whose fault it was (Gloo: "Timed out waiting ... for recv"). The ranks whose collective failed then meet
// once more, through rank 0's store with a short timeout, in the manner of c10d's monitoredBarrier: the others
// connect afresh and the store proves again that it is rank 0's (rank 0 uses the store it hosts: project_store.hpp),
// and under the job's secret key prefix (store_auth.hpp) each rank says it is alive; rank 0 names the ranks that did
// not within the window:
//   rank 3 on node2 (cpu) did not answer within 3 s after a collective failed (...): it is stopped, hung or gone
// If rank 0 itself does not answer, the others name rank 0. Ranks other than 0 wait for rank 0's verdict and then a
// little longer, so that srun's kill-on-bad-exit (rank 0 exits first) ends the step with one line about it.
// Gloo and NCCL runs started with rank 0's store only; the MPI group has its own watchdog (mpi_process_group.hpp).
#include <chrono>
#include <string>
#include <vector>

#include "core/launch.hpp"
#include "ddp_runtime/common/c10d_compat.hpp"
#include "ddp_runtime/distributed/rank_identity.hpp"

namespace ddp::runtime {

// Whether `error` is a collective that failed because of a peer (a timeout, a closed or reset connection), as
// opposed to an error of this rank's own.
bool is_peer_failure(const std::string& error);

// The message to end this rank with, in place of `error`: the verdict naming the ranks that did not answer, or
// `error` itself when no check applies (one process, MPI, not a peer failure) or every rank answered. Bounded by
// `window` plus a few seconds, whatever rank 0's state. `hosted`: on rank 0, the store it hosts (its own check
// needs no connection that proves it); ignored on the other ranks.
std::string explain_peer_failure(const Launch& launch, const std::string& backend,
                                 const std::vector<RankIdentity>& ranks, const std::string& error,
                                 std::chrono::milliseconds window, const compat::StorePtr& hosted = {});

}  // namespace ddp::runtime
