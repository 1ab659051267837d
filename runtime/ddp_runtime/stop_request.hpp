#pragma once
// A request to write a snapshot and stop at the next step boundary. SIGUSR2 raises it: Slurm sends it ahead
// of a time limit or preemption (sbatch --signal=B:USR2@SECONDS; USR1 is NCCL's).
namespace ddp::runtime {

// SIGUSR2 requests a stop, with SA_RESTART so that it does not break the blocking socket calls of the
// collectives; SIGPIPE is ignored.
void install_signal_handlers();
bool stop_requested();

}  // namespace ddp::runtime
