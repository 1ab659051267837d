#pragma once
// Steps as the plugin sees them, for the tests of what srun --ddp gives a task.
#include <cstdint>
#include <string>

#include "spank_plugin/step/options.hpp"
#include "spank_plugin/step/step.hpp"

namespace ddp::test {

// Job 812, step 3, restarted once: 2 nodes (node[1-2]) by 2 tasks of 3 CPUs, as node `node_rank` sees it.
inline StepInfo two_by_two(uint32_t node_rank) {
  StepInfo step;
  step.job_id = 812;
  step.step_id = 3;
  step.num_nodes = 2;
  step.num_tasks = 4;
  step.local_tasks = 2;
  step.cpus_per_task = 3;
  step.restart_count = 1;
  step.node_list = "node[1-2]";
  step.hostname = "node" + std::to_string(node_rank + 1);
  return step;
}

// The options of `srun --ddp`.
inline Options ddp_on() {
  Options options;
  options.enabled = true;
  return options;
}

}  // namespace ddp::test
