#pragma once
// The guides' iperf check, built in: bandwidth and round-trip time between node leaders, over the interface
// training will use and over Gloo's own transport. Pairs follow a ring (each node sends to the next), one pair at
// a time so that tests do not share links, which is also the pattern of a ring all-reduce.
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "doctor/checks/check.hpp"
#include "doctor/run/group.hpp"

namespace gloo {
class Context;
}  // namespace gloo

namespace ddp::doctor {

struct LinkMeasureSize {
  uint64_t max_bytes;                  // the stream stops after this many bytes...
  std::chrono::milliseconds max_time;  // ...or after this long, whichever comes first
  int pings;                           // round trips of 8 bytes for the latency
};
LinkMeasureSize link_measure_size(bool quick, std::chrono::milliseconds stream_time);

struct LinkMeasurement {
  uint64_t bytes = 0;
  double seconds = 0;      // from the first byte sent to the receiver's count of the last
  double rtt_seconds = 0;  // median round trip
};

// Over a connected two-rank Gloo context: its rank 0 measures, its rank 1 serves. Throw what Gloo throws.
LinkMeasurement measure_link(const std::shared_ptr<gloo::Context>& context, const LinkMeasureSize& size);
void serve_link(const std::shared_ptr<gloo::Context>& context, const LinkMeasureSize& size);

// net.p2p_bw (WARN under min_gbps) and net.p2p_rtt (WARN over max_rtt_us) of a link to `to`.
std::vector<CheckResult> grade_link(const LinkMeasurement& measured, const std::string& to, double min_gbps,
                                    double max_rtt_us);

// The ring of pairs among leaders with a usable address: [(a0, a1), (a1, a2), ..., (an, a0)], measuring side first.
std::vector<std::pair<Peer, Peer>> ring_pairs(const std::vector<Peer>& peers);

struct LinkSettings {
  LinkMeasureSize size;
  double min_gbps;
  double max_rtt_us;
  std::chrono::milliseconds per_pair;                // each pair connects and measures within this
  std::function<void(const std::string&)> progress;  // one line per pair this rank measures
};

// Collective over all members. Each leader serves the pair before its own and then measures its own, so the pairs
// run one after the other without anyone directing them; pair i ends by per_pair x (i + 1) after the start, and
// everyone waits for the last. Returns this rank's results as a measuring side (on its own row, which the caller
// stamps); rank 0 adds a SKIP when fewer than two nodes can take part.
std::vector<CheckResult> check_links(Group& group, const std::vector<Peer>& peers, const LinkSettings& settings,
                                     std::chrono::milliseconds wait_for_the_last);

}  // namespace ddp::doctor
