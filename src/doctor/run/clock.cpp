#include "doctor/run/clock.hpp"

#include <algorithm>
#include <cmath>

namespace ddp::doctor {

ClockOffset offset_of(const ClockSample& s) {
  // Two of the times come from a peer: any int64 may arrive. In 128 bits nothing overflows; the results are
  // clamped back to int64 (a clock that far off fails its check all the same).
  using Wide = __int128;
  const auto clamp = [](Wide v) { return static_cast<int64_t>(std::clamp<Wide>(v, INT64_MIN, INT64_MAX)); };
  const Wide delay = (Wide{s.returned_ns} - s.sent_ns) - (Wide{s.replied_ns} - s.received_ns);
  const Wide offset = ((Wide{s.received_ns} - s.sent_ns) + (Wide{s.replied_ns} - s.returned_ns)) / 2;
  return {clamp(offset), clamp(std::max<Wide>(delay, 0) / 2)};
}

ClockOffset best_offset(const std::vector<ClockSample>& samples) {
  ClockOffset best{0, INT64_MAX};
  for (const auto& sample : samples) {
    const ClockOffset offset = offset_of(sample);
    if (offset.error_ns < best.error_ns) best = offset;
  }
  return best;
}

CheckResult grade_clock_offset(const ClockOffset& offset, double warn_ms, double fail_s) {
  const double seconds = static_cast<double>(offset.offset_ns) / 1e9;
  const Status status = grade_at_most(std::fabs(seconds), warn_ms / 1e3, fail_s);
  const std::string value = (seconds >= 0 ? "+" : "") + format_seconds(seconds) + " +- " +
                            format_seconds(static_cast<double>(offset.error_ns) / 1e9);
  std::string detail = "against rank 0's clock";
  if (status != Status::Ok) {
    detail += status == Status::Fail ? ": munge and Slurm reject credentials across this skew; "
                                     : ": log timestamps of different nodes will not line up; ";
    detail += "run chrony or ntpd on every node";
  }
  return make_result(checks::kClockOffset, status, value, "|offset| <= " + format_fixed(warn_ms, 0) + " ms", detail);
}

ClockOffset offset_from_rank0(StoreClient& store, int rounds, Deadline deadline) {
  std::vector<ClockSample> samples;
  for (int round = 0; round < rounds; ++round) {
    const int64_t sent = wall_clock_ns();
    const int64_t rank0 = store.server_time(deadline);
    samples.push_back({sent, rank0, rank0, wall_clock_ns()});
  }
  ClockOffset offset = best_offset(samples);  // rank 0's clock minus this leader's
  offset.offset_ns = -offset.offset_ns;
  return offset;
}

}  // namespace ddp::doctor
