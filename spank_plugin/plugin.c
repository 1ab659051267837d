/* The symbols Slurm's plugin loader looks for, and a dispatcher to the C++ side. */
#include "dispatch.h"

SPANK_PLUGIN(ddp, 1);

int slurm_spank_init(spank_t sp, int ac, char** av) { return ddp_spank_init(sp, ac, av); }
int slurm_spank_init_post_opt(spank_t sp, int ac, char** av) { return ddp_spank_init_post_opt(sp, ac, av); }
int slurm_spank_user_init(spank_t sp, int ac, char** av) { return ddp_spank_user_init(sp, ac, av); }
int slurm_spank_task_init(spank_t sp, int ac, char** av) { return ddp_spank_task_init(sp, ac, av); }
