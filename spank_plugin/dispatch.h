/* The SPANK entry points of ddp.so, implemented in C++ behind C linkage. plugin.c holds the symbols Slurm
 * looks up (spank.h declares them outside extern "C", and SPANK_PLUGIN's const globals would get internal
 * linkage in C++), and forwards each call here. */
#ifndef DDP_SPANK_DISPATCH_H
#define DDP_SPANK_DISPATCH_H

#include <slurm/spank.h>

#ifdef __cplusplus
extern "C" {
#endif

int ddp_spank_init(spank_t sp, int ac, char** av);            /* every context: options, admin config */
int ddp_spank_init_post_opt(spank_t sp, int ac, char** av);   /* srun, sbatch, salloc: reject bad input early */
int ddp_spank_user_init(spank_t sp, int ac, char** av);       /* slurmstepd, once per node: the step plan */
int ddp_spank_task_init(spank_t sp, int ac, char** av);       /* slurmstepd, per task: its environment */
int ddp_spank_local_user_init(spank_t sp, int ac, char** av); /* srun, before launch: the step's id */
int ddp_spank_exit(spank_t sp, int ac, char** av);            /* srun at exit: the step's failure reports */

#ifdef __cplusplus
}
#endif

#endif
