// After the options are parsed. srun, sbatch and salloc refuse a --ddp request that cannot run, before anything
// is allocated or launched. slurmstepd, still root here, fills the node's topology cache for this and later steps.
#include <unistd.h>

#include "dispatch.h"
#include "node_setup.hpp"
#include "plugin_state.hpp"
#include "step.hpp"
#include "topology_cache.hpp"

using namespace ddp::spank;

namespace {

void fill_topology_cache(spank_t sp) {
  uint32_t step_id = 0;
  if (spank_get_item(sp, S_JOB_STEPID, &step_id) != ESPANK_SUCCESS || !ddp::is_application_step(step_id)) return;
  const auto dir = ddp::topology_cache_to_fill(state().options, state().config);
  if (!dir) return;
  try {
    ddp::ensure_topology_cache(*dir);
  } catch (const std::exception& e) {
    slurm_debug("ddp: no topology cache, each step probes the system: %s", e.what());
  }
}

}  // namespace

extern "C" int ddp_spank_init_post_opt(spank_t sp, int, char**) {
  return guarded([&] {
    if (spank_remote(sp)) {
      if (!state().failure && geteuid() == 0) fill_topology_cache(sp);
      return 0;
    }
    if (!state().options.enabled || !state().failure) return 0;
    log_error(state().failure->message);
    return -1;
  });
}
