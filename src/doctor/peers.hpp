#pragma once
// What every rank tells the others before the cross-node checks: where it runs and how to reach it.
#include <cstdint>
#include <string>
#include <vector>

#include "doctor/transport.hpp"

namespace ddp::doctor {

struct Peer {
  int rank = 0;
  std::string host;
  bool leader = false;       // LOCAL_RANK 0: runs the node's checks and speaks for it in node-pair tests
  std::string data_address;  // address of its chosen interface; empty when that interface failed its check
  uint16_t link_port = 0;    // where it serves point-to-point tests (leaders with a data address)
  bool storage_ok = false;   // its snapshot directory passed storage.dir
};

// All members' entries, in members() order.
std::vector<Peer> exchange_peers(Transport& transport, const Peer& mine, Deadline deadline);

std::vector<Peer> leaders(const std::vector<Peer>& peers);
// "rank 1 (node2)"
std::string describe(const Peer& peer);

}  // namespace ddp::doctor
