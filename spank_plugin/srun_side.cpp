// srun, sbatch and salloc: after the command line is parsed, refuse a --ddp request that cannot run,
// before anything is allocated or launched.
#include "dispatch.h"
#include "plugin_state.hpp"

using namespace ddp::spank;

extern "C" int ddp_spank_init_post_opt(spank_t sp, int, char**) {
  return guarded([&] {
    if (spank_remote(sp) || !state().options.enabled || !state().failure) return 0;
    log_error(state().failure->message);
    return -1;
  });
}
