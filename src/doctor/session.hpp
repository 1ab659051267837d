#pragma once
// One ddp-doctor run on one rank: the node's own checks, then the cross-node ones with the other ranks over a
// Transport (TCP or MPI: the same code), then one report on rank 0.
#include <functional>
#include <string>
#include <vector>

#include "doctor/allreduce.hpp"
#include "doctor/doctor_options.hpp"
#include "doctor/launch.hpp"
#include "doctor/report.hpp"
#include "doctor/transport.hpp"

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
  Report report;         // what this rank prints: all ranks' results on rank 0; its own after a failure
  bool print = false;    // ranks other than 0 print nothing when all went well
  int exit_status = 0;   // the same on every rank once rank 0 could tell them
};

// The checks this rank runs on its own; leaders (LOCAL_RANK 0) also run the node's checks.
std::vector<CheckResult> local_checks(const DoctorRun& run);

// Everything, over `transport`. `meeting`: results of how the ranks met (net.master_port), from the launcher;
// rows without a rank are this rank's.
Outcome run_doctor(Transport& transport, const DoctorRun& run, std::vector<CheckResult> meeting);

// A rank that could not meet the others: its own checks and the reason, printed by itself, exit status 1.
Outcome run_unconnected(const DoctorRun& run, const std::string& reason);

// net.master_port after a TCP meeting: rank 0 reports the ranks that never connected.
std::vector<CheckResult> tcp_meeting_results(const Transport& transport, const Launch& launch,
                                             std::chrono::milliseconds timeout);
// net.master_port under MPI: rank 0 listens on MASTER_PORT and every node leader connects to it.
std::vector<CheckResult> probe_master_port(Transport& transport, const Launch& launch,
                                           std::chrono::milliseconds timeout);

}  // namespace ddp::doctor
