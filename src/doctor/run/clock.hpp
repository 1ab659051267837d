#pragma once
// Clock offsets between nodes, NTP style: each node leader asks rank 0's store for its clock (the store runs in
// rank 0's process), timestamping when it asked and when the answer came. The round trip with the least delay
// bounds the error. Leaders ask at the same time: no node waits for another's probes.
#include <cstdint>
#include <vector>

#include "doctor/checks/check.hpp"
#include "store/store.hpp"

namespace ddp::doctor {

struct ClockSample {
  int64_t sent_ns;      // t0: the prober sends (its clock)
  int64_t received_ns;  // t1: the peer receives (the peer's clock)
  int64_t replied_ns;   // t2: the peer answers (the peer's clock)
  int64_t returned_ns;  // t3: the prober receives the answer (its clock)
};

struct ClockOffset {
  int64_t offset_ns = 0;  // the peer's clock minus the prober's
  int64_t error_ns = 0;   // half the network delay of the sample: the true offset is within +- this
};

ClockOffset offset_of(const ClockSample& sample);
// The sample with the smallest round trip: queueing delays only add error, never remove it.
ClockOffset best_offset(const std::vector<ClockSample>& samples);

// clock.offset: WARN above warn_ms (logs of different nodes stop lining up), FAIL above fail_s (munge and
// Slurm reject credentials whose time is off by more than their lifetime, 300 s by default).
CheckResult grade_clock_offset(const ClockOffset& offset, double warn_ms, double fail_s);

// This leader's clock minus rank 0's, from `rounds` probes of rank 0's store.
ClockOffset offset_from_rank0(StoreClient& store, int rounds, Deadline deadline);

}  // namespace ddp::doctor
