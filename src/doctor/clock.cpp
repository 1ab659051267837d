#include "doctor/clock.hpp"

#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

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
  return make_result("clock.offset", status, value, "|offset| <= " + format_fixed(warn_ms, 0) + " ms", detail);
}

int64_t wall_clock_ns() {
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  return static_cast<int64_t>(now.tv_sec) * 1000000000 + now.tv_nsec;
}

namespace {

ClockOffset probe(Transport& transport, int peer, int rounds, Deadline deadline) {
  std::vector<ClockSample> samples;
  for (int round = 0; round < rounds; ++round) {
    const int64_t sent = wall_clock_ns();
    transport.send(peer, "t", deadline);
    WireReader answer(transport.recv(peer, deadline));
    const int64_t returned = wall_clock_ns();
    const int64_t received = answer.get_int();
    samples.push_back({sent, received, answer.get_int(), returned});
  }
  return best_offset(samples);
}

void answer(Transport& transport, int rounds, Deadline deadline) {
  for (int round = 0; round < rounds; ++round) {
    transport.recv(0, deadline);
    const int64_t received = wall_clock_ns();
    transport.send(0, WireWriter().put_int(received).put_int(wall_clock_ns()).bytes(), deadline);
  }
}

}  // namespace

std::vector<CheckResult> measure_clock_offsets(Transport& transport, const std::vector<Peer>& peers, int rounds,
                                               double warn_ms, double fail_s, std::chrono::milliseconds timeout) {
  // Rank 0 probes the leaders one after the other: the last one waits for all the others' rounds first.
  const Deadline deadline = Deadline::after(timeout * static_cast<int>(peers.size() + 1));
  if (transport.rank() != 0) {
    for (const auto& peer : peers) {
      if (peer.leader && peer.rank == transport.rank()) answer(transport, rounds, deadline);
    }
    return {};
  }
  std::vector<CheckResult> results;
  for (const auto& peer : peers) {
    if (!peer.leader) continue;
    CheckResult result = peer.rank == 0
                             ? make_result("clock.offset", Status::Ok, "0 (reference)", "", "rank 0's clock")
                             : grade_clock_offset(probe(transport, peer.rank, rounds, deadline), warn_ms, fail_s);
    result.rank = peer.rank;
    result.host = peer.host;
    results.push_back(std::move(result));
  }
  return results;
}

}  // namespace ddp::doctor
