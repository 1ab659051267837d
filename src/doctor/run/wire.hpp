#pragma once
// The doctor's messages between ranks, in the store's wire format (store/wire.hpp): check results, the member list,
// each rank's peer entry. Every count is checked against what the caller allows before anything is allocated.
#include <cstdint>
#include <string>
#include <vector>

#include "doctor/checks/check.hpp"
#include "doctor/run/job_wide.hpp"
#include "store/wire.hpp"

namespace ddp::doctor {

std::string encode_results(const std::vector<CheckResult>& results);
std::vector<CheckResult> decode_results(std::string bytes);

// Rank 0's list of the ranks that joined: ascending, from 0, with `rank` among them, of a run of `world_size`.
std::string encode_members(const std::vector<int>& members);
std::vector<int> decode_members(std::string bytes, int world_size, int rank);

// What every rank tells the others before the cross-node checks: where it runs and how to reach it.
struct Peer {
  int rank = 0;
  std::string host;
  bool leader = false;       // LOCAL_RANK 0: runs the node's checks and speaks for it in node-pair tests
  std::string data_address;  // address of its chosen interface; empty when that interface failed its check
  bool storage_ok = false;   // its snapshot directory passed storage.dir
  NodeFacts facts;           // a leader's: its node's, for the job-wide checks
};
std::string encode_peer(const Peer& peer);
Peer decode_peer(std::string bytes);

}  // namespace ddp::doctor
