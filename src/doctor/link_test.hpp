#pragma once
// The guides' iperf check, built in: TCP bandwidth and round-trip time between node leaders, on the interface
// training will use. Pairs follow a ring (each node sends to the next), one pair at a time so that tests do not
// share links, which is also the pattern of a ring all-reduce.
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "doctor/check.hpp"
#include "doctor/peers.hpp"

namespace ddp::doctor {

struct LinkTestSize {
  uint64_t max_bytes;                  // the stream stops after this many bytes...
  std::chrono::milliseconds max_time;  // ...or after this long, whichever comes first
  int pings;                           // round trips of 8 bytes for the latency
};
LinkTestSize link_test_size(bool quick);

struct LinkMeasurement {
  uint64_t bytes = 0;
  double seconds = 0;    // from the first byte sent to the receiver's acknowledgement of the last
  double rtt_seconds = 0;  // median round trip
};

// One client on `listener`: answers its pings, then reads its stream. Throws NetError.
void serve_link_test(const Socket& listener, Deadline deadline);
// Throws NetError.
LinkMeasurement run_link_test(const std::string& address, uint16_t port, const LinkTestSize& size, Deadline deadline);

// net.p2p_bw (WARN under min_gbps) and net.p2p_rtt (WARN over max_rtt_us) of a link to `to`.
std::vector<CheckResult> grade_link(const LinkMeasurement& measured, const std::string& to, double min_gbps,
                                    double max_rtt_us);

// The ring of pairs among leaders that can serve: [(a0, a1), (a1, a2), ..., (an, a0)], sender first.
std::vector<std::pair<Peer, Peer>> ring_pairs(const std::vector<Peer>& peers);

struct LinkSettings {
  LinkTestSize size;
  double min_gbps;
  double max_rtt_us;
  std::chrono::milliseconds timeout;
  std::function<void(const std::string&)> progress;  // rank 0: one line per pair
};

// Collective over all members. `listener`: this rank's link-test listener (leaders with a data address).
// Rank 0 returns every pair's results (on the sending rank's row); the others return nothing.
std::vector<CheckResult> check_links(Transport& transport, const std::vector<Peer>& peers, const Socket& listener,
                                     const LinkSettings& settings);

}  // namespace ddp::doctor
