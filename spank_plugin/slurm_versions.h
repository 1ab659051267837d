/* The Slurm versions ddp.so supports, 22.05 to 26.05, and what differs between them for a SPANK plugin: the one
 * place that reads SLURM_VERSION_NUMBER. ddp.so is built against the headers of the Slurm that loads it (its
 * plugin_version must match), so every difference is known at compile time.
 *
 *  22.05  Remote option callbacks run twice (from the launch message, then from the job's environment): applying
 *         an option is idempotent. A failure returned by user_init gives srun "launch failed" with exit status 0,
 *         and in a batch job drains the node; one returned by task_init fails the step with exit status 1. So
 *         ddp.so never fails user_init: every problem is kept and reported from task_init (as NVIDIA/pyxis does).
 *  23.02  srun --container (oci.conf) writes each task's config.json as the task starts, from its final environment,
 *         so what ddp.so sets in task_init reaches the container. 22.05 wrote one per node before any task started,
 *         from the step's environment (and ran one task per node there): no per-task value can reach the program,
 *         so ddp.so refuses --ddp with --container in srun on 22.05, in one line.
 *  23.11  A SPANK failure marks the step failed and srun exits 1, also from user_init; a batch job's user_init
 *         failure still drains the node (and requeues the job). hostlist_t becomes a pointer type: ddp.so parses
 *         node lists itself (src/hostlist) and uses none of Slurm's hostlist functions.
 *  24.05  Remote option callbacks run once. SPANK options reach the remote side under srun/sbatch --export (on
 *         22.05 --ddp holds under --export=NONE as well: it rides in the launch message and the batch job's
 *         SLURM_SPANK_ variables, which --export does not filter).
 *  25.05  Any non-zero return of a callback is an error: ddp.so returns exactly 0 or -1 (guarded()). A failing
 *         slurm_spank_init drains the node unless the plugin's slurm_spank_init_failure_mode says otherwise:
 *         ddp.so's init fails only when Slurm refuses its option table, and then only the job fails.
 *         spank_fini runs before pam_finish (ddp.so has no fini). A positive return is an error too (before, only
 *         a negative one was).
 *  25.11  slurm_spank_task_init_privileged may run in parallel with slurm_spank_task_post_fork: ddp.so defines
 *         neither, so no state of its own is shared between the two. 25.11.0 to 25.11.4 assert, in developer
 *         builds, on options registered without an argument; --ddp takes an optional one (has_arg 2).
 *  26.05  SchedMD's notes: after a task exits badly, the other tasks get SIGCONT and SIGTERM, then SIGKILL after
 *         KillWait (was SIGKILL alone). Under srun -K, 22.05 and 24.11 already send that sequence (checked): a task
 *         that handles SIGTERM has KillWait to save its state on every version.
 *         --gres=gpu:N and --gpus-per-node exclude each other, wherever each comes from (the templates ask for
 *         no GPUs themselves, so either works from the command line); the API
 *         takes slurm_step_id_t, which matters only to code linking libslurm (ddp.so does not).
 * Every version: Slurm ignores a failing callback of a plugin that plugstack.conf loads as "optional"
 *         (_do_call_stack in spank.c/plugstack.c). A refusal of ddp.so therefore ends the process itself: the task
 *         with _exit(1) before exec (as slurmstepd's exec_task does for a failed "required" task_init), srun, sbatch
 *         and salloc with exit(1) (as after a failed "required" init_post_opt).
 *         slurm_conf_t, which ddp.so reads and writes in srun, kept its layout through every micro release of each
 *         series from 22.05 to 26.05 (slurm/slurm.h at SchedMD's tags), and the loader refuses a SPANK plugin of
 *         another series (plugin.c: major and minor must match); ddp.so also compares the running Slurm's series
 *         (the S_SLURM_VERSION_MAJOR and _MINOR items, valid in every context) with its own before touching it.
 * tests/cluster/spank_versions.sh checks the behaviour of the Slurm under test against this list. */
#ifndef DDP_SLURM_VERSIONS_H
#define DDP_SLURM_VERSIONS_H

#include <slurm/slurm_version.h>

#define DDP_SLURM_AT_LEAST(major, minor) (SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(major, minor, 0))

#if !DDP_SLURM_AT_LEAST(22, 5)
#error "ddp.so supports Slurm 22.05 and later: these slurm/slurm_version.h headers are older"
#endif

/* Slurm 23.02 gives a --container task the environment task_init left (see above). */
#define DDP_SLURM_CONTAINER_TAKES_TASK_ENV DDP_SLURM_AT_LEAST(23, 2)

/* Slurm 25.05 reads how a failing slurm_spank_init ends: the node (drain) or the job. */
#define DDP_SLURM_HAS_INIT_FAILURE_MODE DDP_SLURM_AT_LEAST(25, 5)

#endif
