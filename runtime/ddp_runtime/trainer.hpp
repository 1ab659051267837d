#pragma once
// ddp-train's training run: process group, workload, resume, the DDP training loop with progress lines in the
// seed's format, snapshots, and the final model.
#include "ddp_runtime/cli.hpp"
#include "launch.hpp"

namespace ddp::runtime {

// Exit status after a stop request (SIGUSR2) was honoured with a snapshot: EX_TEMPFAIL, "try again later".
constexpr int kExitStopped = 75;

// Returns 0 when every epoch ran, kExitStopped after a stop request. Throws ddp::Error for bad input (a
// snapshot that does not fit the model, an unwritable snapshot directory) and std::exception for failures.
int run_training(const TrainOptions& options, const Launch& launch);

}  // namespace ddp::runtime
