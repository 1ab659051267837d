#pragma once
// Who every rank of the run is, for messages that name a rank: its host and its device ("cpu", "cuda:1").
// Gathered once, after the process group is up, with one all-reduce.
#include <string>
#include <vector>

#include "ddp_runtime/distributed/process_group.hpp"

namespace ddp::runtime {

struct RankIdentity {
  std::string host;
  std::string device;
  std::string standby;   // "address port" of its standby store (recovery.hpp); empty without recovery in place
  int launch_rank = -1;  // its rank when the run started, which Slurm's task numbers and messages name
};

// Collective: every rank calls it. Names are cut to what fits in kIdentityBytes.
std::vector<RankIdentity> gather_identities(const Distributed& dist, const std::string& standby = "");

// "rank 3 on node2 (cpu)", numbered as at the run's start; "rank 3" when `ranks` does not know it.
std::string describe_rank(const std::vector<RankIdentity>& ranks, int rank);

}  // namespace ddp::runtime
