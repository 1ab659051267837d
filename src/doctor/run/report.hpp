#pragma once
// What ddp-doctor prints: a table for people, JSON for scripts, and the exit status.
#include <string>
#include <vector>

#include "doctor/checks/check.hpp"

namespace ddp::doctor {

struct Report {
  std::string launcher;  // how the ranks met: "tcp 10.0.0.1:29500", "mpi", "single"
  int world_size = 1;
  std::vector<CheckResult> results;
};

// Rows ordered by rank (results about the whole run last), columns sized to their content:
//   HOST  RANK  CHECK  STATUS  VALUE  THRESHOLD  DETAIL
std::string format_table(const Report& report);
// One line: nodes, ranks and how many checks had each status.
std::string format_summary(const Report& report);
// {"ok":..,"launcher":..,"world_size":..,"nodes":..,"counts":{..},"results":[{..},..]}
std::string format_json(const Report& report);

// 1 when any check failed, else 0: warnings alone do not stop a job script.
int exit_status(const std::vector<CheckResult>& results);

}  // namespace ddp::doctor
