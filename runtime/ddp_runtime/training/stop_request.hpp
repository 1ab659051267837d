#pragma once
// A request to write a snapshot and stop at the next step boundary. SIGUSR2, SIGTERM and SIGINT raise it:
// Slurm sends USR2 ahead of a time limit or preemption (sbatch --signal=B:USR2@SECONDS; USR1 is NCCL's), and
// SIGTERM at preemption, scancel, the time limit and, from 26.05 on, to the tasks that survive a bad exit, with
// SIGKILL KillWait (or GraceTime) later. The ranks agree on the request at a step boundary, rank 0 writes the
// snapshot synchronously and every rank exits with kExitStopped (train.hpp), which ddp-restart takes as "requeue".
namespace ddp::runtime {

// USR2, TERM and INT request a stop, with SA_RESTART so that they do not break the blocking socket calls of the
// collectives; a second SIGINT (Ctrl-C twice) ends the process at once, as SIGINT's default does (SIGTERM may come
// twice from Slurm: at the time limit, slurmd sends it to the steps and then again to the whole job). SIGPIPE is
// ignored.
void install_signal_handlers();
bool stop_requested();
// The signal that raised the request first ("SIGTERM"), or "" when none did.
const char* stop_signal_name();

}  // namespace ddp::runtime
