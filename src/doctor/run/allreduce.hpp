#pragma once
// All-reduce bus bandwidth at a few sizes, the way nccl-tests reports it, with the backends training uses:
// Gloo on CPU (ddp_doctor_gloo) and NCCL on GPU (ddp_doctor_nccl, where CUDA was found at build time).
// The orchestration lives here, free of those libraries; a backend only moves the bytes.
#include <chrono>
#include <cstddef>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "doctor/checks/check.hpp"
#include "doctor/run/group.hpp"

namespace ddp::doctor {

struct AllreduceSize {
  size_t bytes;
  int iterations;  // timed, after one untimed warm-up
};
std::vector<AllreduceSize> allreduce_sizes(bool quick);

// nccl-tests' definitions: algbw = bytes / time; busbw = algbw * 2(n-1)/n, the rate each rank's link carries
// in a ring all-reduce, comparable with the link bandwidth whatever the rank count.
double algorithm_bandwidth(size_t bytes, double seconds);
double bus_bandwidth(double algorithm_bandwidth, int ranks);

// Every rank contributes floats equal to its index among the members plus one, so each element of the sum
// must be n(n+1)/2 (exact in float for any realistic n).
float fill_value(int member_index);
float expected_sum(int ranks);

struct AllreduceTiming {
  size_t bytes = 0;
  double seconds = 0;  // per all-reduce, averaged over the timed iterations
  bool correct = false;
};

struct CollectiveSetup {
  std::string data_address;                  // this rank's address on the chosen interface
  int local_rank = 0;                        // which GPU a GPU backend takes
  std::chrono::milliseconds timeout{30000};  // each wait: the set-up exchanges, Gloo's connection and operations
  std::chrono::milliseconds phase{120000};   // the whole check ends within this (TimeBudget::allreduce)
};

// A backend only moves bytes; check_allreduce() runs its steps on every member alike, and exchanges each
// rank's set-up error before the collective part, so that a failure on one rank stops all of them there.
class AllreduceBackend {
 public:
  virtual ~AllreduceBackend() = default;
  virtual std::string name() const = 0;        // "gloo", "nccl"
  virtual const CheckInfo& check() const = 0;  // checks::kAllreduceGloo, ...
  // Why this rank cannot take part (no CUDA device, ...); empty when it can. Local and cheap: a SKIP.
  virtual std::string unavailable() = 0;
  // This rank's own set-up (a device, a GPU); throws on failure. On the `root` (rank 0) returns what it hands
  // every rank (NCCL's id), else "".
  virtual std::string prepare(const CollectiveSetup& setup, bool root) = 0;
  // Collective over every member, in members() order; `from_root` is what rank 0's prepare() returned.
  virtual std::vector<AllreduceTiming> run(Group& group, const CollectiveSetup& setup, const std::string& from_root,
                                           const std::vector<AllreduceSize>& sizes) = 0;
};

// allreduce.<backend>: one result per size with busbw and algbw; `wrong_on[i]`: the ranks whose sum was wrong
// at size i (FAIL).
std::vector<CheckResult> grade_allreduce(const CheckInfo& check, const std::vector<AllreduceTiming>& timings, int ranks,
                                         const std::vector<std::vector<std::string>>& wrong_on);

// Collective over all members: runs `backend` when every member can, else rank 0 reports a SKIP with the
// reasons. Rank 0 returns the whole-run results; the others return nothing. `progress` may be empty. Ends
// within setup.phase.
std::vector<CheckResult> check_allreduce(Group& group, AllreduceBackend& backend, const CollectiveSetup& setup,
                                         const std::vector<AllreduceSize>& sizes,
                                         const std::function<void(const std::string&)>& progress);

}  // namespace ddp::doctor
