#pragma once
// Clock offsets between nodes, NTP style: rank 0 timestamps a round trip to each node leader, the leader
// timestamps when the probe arrived and when it answered. The round trip with the least delay bounds the error.
#include <chrono>
#include <cstdint>
#include <vector>

#include "doctor/check.hpp"
#include "doctor/peers.hpp"

namespace ddp::doctor {

struct ClockSample {
  int64_t sent_ns;      // t0: rank 0 sends (rank 0's clock)
  int64_t received_ns;  // t1: the peer receives (peer's clock)
  int64_t replied_ns;   // t2: the peer answers (peer's clock)
  int64_t returned_ns;  // t3: rank 0 receives the answer (rank 0's clock)
};

struct ClockOffset {
  int64_t offset_ns = 0;  // peer's clock minus rank 0's
  int64_t error_ns = 0;   // half the network delay of the sample: the true offset is within +- this
};

ClockOffset offset_of(const ClockSample& sample);
// The sample with the smallest round-trip delay: queueing delays only add error, never remove it.
ClockOffset best_offset(const std::vector<ClockSample>& samples);

// clock.offset: WARN above warn_ms (logs of different nodes stop lining up), FAIL above fail_s (munge and
// Slurm reject credentials whose time is off by more than their lifetime, 300 s by default).
CheckResult grade_clock_offset(const ClockOffset& offset, double warn_ms, double fail_s);

int64_t wall_clock_ns();

// Collective over all members: rank 0 probes each leader `rounds` times and returns one clock.offset result
// per leader (rank 0's own is the reference); other ranks answer and return nothing.
std::vector<CheckResult> measure_clock_offsets(Transport& transport, const std::vector<Peer>& peers, int rounds,
                                               double warn_ms, double fail_s, std::chrono::milliseconds timeout);

}  // namespace ddp::doctor
