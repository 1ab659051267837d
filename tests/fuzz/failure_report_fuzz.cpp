// libFuzzer target: what ddp-why, ddp-restart and srun's exit line read about a failed step (failure_report.hpp):
// the tasks' error files (torchrun's JSON, which the user's program writes) and srun's output (which holds the
// tasks' own lines). The input is both: any bytes end in reports and exits that hold what the text said, joined
// into one line, never a crash or a hang.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "report/failure_report.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  ddp::StepReports reports;
  std::string why;
  if (auto report = ddp::parse_error_report(text, &why)) {
    if (report->exit_code && (*report->exit_code < 0 || *report->exit_code > 255)) std::abort();
    reports.errors.push_back(std::move(*report));
  } else if (why.empty()) {
    std::abort();  // a refusal always says why
  }
  const auto exits = ddp::parse_srun_exits(text);
  for (const ddp::TaskExit& exit : exits) {
    if (exit.first_task > exit.last_task || exit.node.empty() || exit.status.empty()) std::abort();
    if (exit.exit_code && (*exit.exit_code < 0 || *exit.exit_code > 255)) std::abort();
  }
  if (const auto failure = ddp::first_failure(reports, exits)) {
    if (ddp::one_line(*failure).empty()) std::abort();
  } else if (!reports.errors.empty() || !exits.empty()) {
    std::abort();
  }
  (void)ddp::task_output_tail(text, 0, 5);
  return 0;
}
