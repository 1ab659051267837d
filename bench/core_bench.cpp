// Per-task cost of the core: expanding a 4096-host step node list and computing one task's environment
// from it (what the plugin does, minus Slurm). Goal: under 1 ms per task.
// Also what a step's failure reports cost (step_logs.hpp, failure_report.hpp): per task, its report variables and
// the log directory's preparation (file-system calls, here on the local temporary directory); after a failure,
// reading 32768 reports, one per rank of a 4096 x 8 step, as ddp-why and srun do.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "base/hostlist.hpp"
#include "report/failure_report.hpp"
#include "report/step_logs.hpp"
#include "spank_plugin/step/task_env.hpp"
#include "timing.hpp"

using ddp::bench::microseconds_per_call;

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

  const double report_env_us = microseconds_per_call(2000, [&](int i) {
    ddp::TaskEnv env(no_user_values);
    ddp::add_failure_reporting(env, std::string("/fsx/logs/123456.2"), static_cast<uint32_t>(i), "gpu-b3024");
    sink += env.vars().size();
  });
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("core_bench." + std::to_string(getpid()))).string();
  const std::string step_dir = dir + "/logs/123456.2";
  const double prepare_us = microseconds_per_call(
      200, [&](int) { ddp::prepare_step_log_dir(dir + "/logs", "123456.2", std::chrono::seconds(30)); });
  constexpr int kReports = 4096 * 8;
  const std::string report = R"json({"message": {"message": "RuntimeError: Connection closed by peer", )json"
                             R"json("extraInfo": {"py_callstack": "Traceback ...", "timestamp": "1795473684"}}})json";
  for (int rank = 0; rank < kReports; ++rank) {
    std::ofstream(step_dir + "/" +
                  ddp::error_file_name(static_cast<uint32_t>(rank), "gpu-b" + std::to_string(rank / 8)))
        << report;
  }
  const auto read_start = std::chrono::steady_clock::now();
  const ddp::StepReports reports = ddp::read_step_reports(step_dir, {});
  const std::chrono::duration<double, std::milli> read_ms = std::chrono::steady_clock::now() - read_start;
  sink += reports.errors.size();
  std::filesystem::remove_all(dir);

  std::printf("core_bench: expand a 4096-host node list:                 %8.1f us\n", expand_us);
  std::printf("core_bench: plan + environment of one task, 4096 nodes:   %8.1f us  (goal < 1000 us: %.0fx under)\n",
              per_task_us, 1000.0 / per_task_us);
  std::printf("core_bench: both together, worst case per task:             %8.1f us  (goal < 1000 us)\n",
              expand_us + per_task_us);
  std::printf("core_bench: error-report variables of one task:           %8.1f us\n", report_env_us);
  std::printf(
      "core_bench: prepare the step's log directory, one task:   %8.1f us  (local disk: a child with a deadline "
      "walks it with openat)\n",
      prepare_us);
  std::printf("core_bench: read %d error reports of one step:         %8.1f ms  (ddp-why, srun at exit)\n", kReports,
              read_ms.count());
  std::printf("core_bench: (checksum %zu)\n", sink);
  return 0;
}
