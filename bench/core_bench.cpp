// Per-task cost of the core: expanding a 4096-host step node list and computing one task's environment
// from it (what the plugin does, minus Slurm). Goal from the foundation issue: under 1 ms per task.
#include <chrono>
#include <cstdio>

#include "hostlist.hpp"
#include "task_env.hpp"

namespace {

template <typename Body>
double microseconds_per_call(int calls, Body&& body) {
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) body(i);
  const std::chrono::duration<double, std::micro> elapsed = std::chrono::steady_clock::now() - start;
  return elapsed.count() / calls;
}

}  // namespace

int main() {
  const std::string node_list = "gpu-a[0001-2048],gpu-b[0001-1024,2001-3024]";  // 4096 hosts
  size_t sink = 0;
  const double expand_us =
      microseconds_per_call(200, [&](int) { sink += ddp::Hostlist::parse(node_list).expand().size(); });

  ddp::StepInfo step;
  step.job_id = 123456;
  step.step_id = 2;
  step.num_nodes = 4096;
  step.num_tasks = 4096 * 8;
  step.local_tasks = 8;
  step.node_list = node_list;
  step.hostname = "gpu-b3024";
  ddp::Options options;
  options.enabled = true;
  const auto no_user_values = [](const std::string&) -> std::optional<std::string> { return std::nullopt; };
  const double per_task_us = microseconds_per_call(2000, [&](int i) {
    const ddp::StepPlan plan = ddp::plan_step(step, options, ddp::Config{}, {32768, 60999});
    const auto node = static_cast<uint32_t>(i % 4096);
    const ddp::TaskEnv env = ddp::task_env(plan, {node * 8 + 3, 3, node}, no_user_values);
    sink += env.vars().size();
  });

  std::printf("core_bench: expand a 4096-host node list:                 %8.1f us\n", expand_us);
  std::printf("core_bench: plan + environment of one task, 4096 nodes:   %8.1f us  (goal < 1000 us: %.0fx under)\n",
              per_task_us, 1000.0 / per_task_us);
  std::printf("core_bench: both together, worst case per task:             %8.1f us  (goal < 1000 us)\n",
              expand_us + per_task_us);
  std::printf("core_bench: (checksum %zu)\n", sink);
  return 0;
}
