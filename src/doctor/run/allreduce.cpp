#include "doctor/run/allreduce.hpp"

#include <stdexcept>

#include "base/parse.hpp"

namespace ddp::doctor {
namespace {

std::string encode_outcome(const std::string& error, bool own_error, const std::vector<AllreduceTiming>& timings) {
  WireWriter out;
  out.put(error).put_int(own_error).put_int(static_cast<int64_t>(timings.size()));
  for (const auto& t : timings) out.put_int(static_cast<int64_t>(t.bytes)).put_int(t.correct);
  return out.bytes();
}

// Rank 0's view of what every member reported: the first error a rank caused itself (else the first one), and
// the members with a wrong sum per size.
struct Outcomes {
  std::string error;
  bool own = false;
  std::vector<std::vector<std::string>> wrong_on;  // per size
};

Outcomes collect(const Group& group, const std::vector<std::string>& messages, size_t sizes) {
  Outcomes outcomes;
  outcomes.wrong_on.resize(sizes);
  for (size_t m = 0; m < messages.size(); ++m) {
    const std::string who = "rank " + std::to_string(group.members()[m]);
    WireReader in(messages[m]);
    const std::string error = in.get_text();
    const bool own = in.get_int(0, 1) != 0;
    if (!error.empty() && (outcomes.error.empty() || (own && !outcomes.own))) {
      outcomes.error = who + ": " + error;
      outcomes.own = own;
    }
    const auto count = static_cast<size_t>(in.get_int(0, static_cast<int64_t>(sizes)));
    for (size_t s = 0; s < count; ++s) {
      in.get_int();
      if (in.get_int(0, 1) == 0) outcomes.wrong_on[s].push_back(who);
    }
  }
  return outcomes;
}

std::string unavailable_reasons(const Group& group, const std::vector<std::string>& reasons) {
  std::string text;
  for (size_t m = 0; m < reasons.size(); ++m) {
    if (reasons[m].empty()) continue;
    text += (text.empty() ? "" : "; ") + std::string("rank ") + std::to_string(group.members()[m]) + ": " +
            printable(reasons[m], kMaxField);
  }
  return text;
}

// Every rank's set-up error and what rank 0 hands out, in one exchange: returns rank 0's payload, or throws this
// rank's own error, or a PeerFailure naming the first rank whose set-up failed.
struct PeerFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::string exchange_set_up(Group& group, AllreduceBackend& backend, const CollectiveSetup& setup, Deadline deadline) {
  std::string error;
  std::string payload;
  try {
    payload = backend.prepare(setup, group.rank() == 0);
  } catch (const std::exception& e) {
    error = e.what();
  }
  const auto everyone =
      group.all_gather(backend.name() + " set-up", WireWriter().put(error).put(payload).bytes(), deadline);
  if (!error.empty()) throw std::runtime_error(error);
  for (size_t member = 0; member < everyone.size(); ++member) {
    if (!WireReader(everyone[member]).get().empty()) {
      throw PeerFailure(backend.name() + " set-up failed on rank " + std::to_string(group.members()[member]));
    }
  }
  WireReader root(everyone[0]);
  root.get();
  return root.get();
}

}  // namespace

std::vector<AllreduceSize> allreduce_sizes(bool quick) {
  if (quick) return {{64u << 10, 5}, {1u << 20, 5}, {4u << 20, 3}};
  return {{1u << 20, 20}, {16u << 20, 10}, {128u << 20, 5}};
}

double algorithm_bandwidth(size_t bytes, double seconds) {
  return seconds > 0 ? static_cast<double>(bytes) / seconds : 0;
}

double bus_bandwidth(double algorithm_bandwidth, int ranks) {
  if (ranks < 2) return 0;
  return algorithm_bandwidth * 2.0 * (ranks - 1) / ranks;
}

float fill_value(int member_index) { return static_cast<float>(member_index + 1); }

float expected_sum(int ranks) { return static_cast<float>(ranks) * static_cast<float>(ranks + 1) / 2; }

std::vector<CheckResult> grade_allreduce(const CheckInfo& check, const std::vector<AllreduceTiming>& timings, int ranks,
                                         const std::vector<std::vector<std::string>>& wrong_on) {
  std::vector<CheckResult> results;
  for (size_t i = 0; i < timings.size(); ++i) {
    const auto& t = timings[i];
    const double algbw = algorithm_bandwidth(t.bytes, t.seconds);
    const bool wrong = i < wrong_on.size() && !wrong_on[i].empty();
    std::string detail = "algbw " + format_gbytes(algbw) + ", " + format_seconds(t.seconds) + " per all-reduce, " +
                         std::to_string(ranks) + " ranks";
    if (wrong) {
      detail = "wrong sums on ";
      for (size_t w = 0; w < wrong_on[i].size(); ++w) detail += (w ? ", " : "") + wrong_on[i][w];
      detail += ": data is corrupted between ranks (faulty NIC, driver or memory); expected every element to be " +
                format_fixed(expected_sum(ranks), 0);
    }
    results.push_back(make_result(check, wrong ? Status::Fail : Status::Ok,
                                  "busbw " + format_gbytes(bus_bandwidth(algbw, ranks)) + " @ " + format_bytes(t.bytes),
                                  "sum correct", detail));
  }
  return results;
}

std::vector<CheckResult> check_allreduce(Group& group, AllreduceBackend& backend, const CollectiveSetup& setup,
                                         const std::vector<AllreduceSize>& sizes,
                                         const std::function<void(const std::string&)>& progress) {
  const CheckInfo& check = backend.check();
  const int ranks = static_cast<int>(group.members().size());
  // The set-up exchanges, then Gloo's connection and the first all-reduce may each wait for a rank that failed.
  const Deadline set_up = Deadline::after(setup.timeout);
  const Deadline reported = Deadline::after(setup.phase);
  const auto reasons = group.all_gather(check.name, backend.unavailable(), set_up);
  const std::string unavailable = unavailable_reasons(group, reasons);
  if (!unavailable.empty() || ranks < 2) {
    if (group.rank() != 0) return {};
    return {skipped(check, unavailable.empty() ? "one rank" : unavailable)};
  }
  if (progress) progress("all-reduce " + backend.name() + " over " + std::to_string(ranks) + " ranks");
  std::vector<AllreduceTiming> timings;
  std::string error;
  bool own_error = true;
  try {
    timings = backend.run(group, setup, exchange_set_up(group, backend, setup, set_up), sizes);
  } catch (const PeerFailure& e) {
    error = e.what();
    own_error = false;
  } catch (const std::exception& e) {
    error = e.what();
  }
  const auto messages =
      group.gather(std::string(check.name) + " results", encode_outcome(error, own_error, timings), reported);
  if (group.rank() != 0) return {};
  const Outcomes outcomes = collect(group, messages, sizes.size());
  if (!outcomes.error.empty()) {
    return {make_result(check, Status::Fail, "failed", "sum correct",
                        outcomes.error + " (the interface, ports between nodes, or the backend's own setup)")};
  }
  return grade_allreduce(check, timings, ranks, outcomes.wrong_on);
}

}  // namespace ddp::doctor
