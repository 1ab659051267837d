/* The symbols Slurm's plugin loader looks for, and a dispatcher to the C++ side. */
#include "dispatch.h"
#include "slurm_versions.h"

SPANK_PLUGIN(ddp, 1);

#if DDP_SLURM_HAS_INIT_FAILURE_MODE
/* A failing init must never drain a node: it fails the job that asked for --ddp, nothing else. */
int slurm_spank_init_failure_mode = ESPANK_JOB_FAILURE;
#endif

int slurm_spank_init(spank_t sp, int ac, char** av) { return ddp_spank_init(sp, ac, av); }
int slurm_spank_init_post_opt(spank_t sp, int ac, char** av) { return ddp_spank_init_post_opt(sp, ac, av); }
int slurm_spank_user_init(spank_t sp, int ac, char** av) { return ddp_spank_user_init(sp, ac, av); }
int slurm_spank_task_init(spank_t sp, int ac, char** av) { return ddp_spank_task_init(sp, ac, av); }
int slurm_spank_local_user_init(spank_t sp, int ac, char** av) { return ddp_spank_local_user_init(sp, ac, av); }
int slurm_spank_exit(spank_t sp, int ac, char** av) { return ddp_spank_exit(sp, ac, av); }
