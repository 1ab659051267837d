#pragma once
// One ddp-doctor run on one rank: the node's own checks, then the cross-node ones with the other ranks of its
// group (group.hpp), then one report on rank 0. Every wait ends by its phase's deadline (TimeBudget).
#include <functional>
#include <string>
#include <vector>

#include "core/launch.hpp"
#include "doctor/run/allreduce.hpp"
#include "doctor/run/doctor_options.hpp"
#include "doctor/run/group.hpp"
#include "doctor/run/report.hpp"

namespace ddp::doctor {

struct DoctorRun {
  DoctorOptions options;
  Launch launch;
  EnvLookup env;
  std::string host;
  std::vector<AllreduceBackend*> backends;
  // The topology binding's checks (ddp_doctor_topology: hwloc), run by each node's leader; may be empty.
  std::function<std::vector<CheckResult>(const EnvLookup&)> topology_checks;
  std::function<void(const std::string&)> progress;  // long steps, rank 0 only
};

struct Outcome {
  Report report;        // what this rank prints: all ranks' results on rank 0; its own after a failure
  bool print = false;   // ranks other than 0 print nothing when all went well
  int exit_status = 0;  // the same on every rank once rank 0 could tell them
};

// The checks this rank runs on its own; leaders (LOCAL_RANK 0) also run the node's checks.
std::vector<CheckResult> local_checks(const DoctorRun& run);

// Everything, with the other members of `group`. `meeting`: how the ranks met (net.master_port); rows without a
// rank are this rank's.
Outcome run_doctor(Group& group, const DoctorRun& run, std::vector<CheckResult> meeting);

// A rank that could not meet the others: its own checks and the reason, printed by itself, exit status 1.
Outcome run_unconnected(const DoctorRun& run, const std::string& reason);

}  // namespace ddp::doctor
