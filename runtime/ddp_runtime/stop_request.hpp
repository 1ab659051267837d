#pragma once
// A request to write a snapshot and stop at the next step boundary. SIGUSR2 raises it: Slurm sends it ahead
// of a time limit or preemption (sbatch --signal=B:USR2@SECONDS; USR1 is NCCL's).
namespace ddp::runtime {

// SA_RESTART, so that the signal does not break the blocking socket calls of the collectives.
void install_stop_signal_handler();
void request_stop();
bool stop_requested();

}  // namespace ddp::runtime
