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

#include "doctor/check.hpp"
#include "doctor/peers.hpp"

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
  int member_index = 0;      // this rank's position in members(): its rank in the backend's communicator
  std::string data_address;  // this rank's address on the chosen interface
  int local_rank = 0;        // which GPU a GPU backend takes
  std::chrono::milliseconds timeout{30000};
};

// Thrown by a backend on a rank that stopped because another rank failed: the report names that rank's own error.
class PeerFailure : public std::runtime_error {
 public:
  explicit PeerFailure(const std::string& message) : std::runtime_error(message) {}
};

class AllreduceBackend {
 public:
  virtual ~AllreduceBackend() = default;
  virtual std::string name() const = 0;  // "gloo", "nccl"
  // Why this rank cannot take part (no CUDA device, ...); empty when it can. Local and cheap.
  virtual std::string unavailable() = 0;
  // Collective over every member, in the same order everywhere. Throws std::exception on a failure, and
  // PeerFailure where it stops because another rank failed; either way it takes part in every exchange that
  // the other ranks reach, so that all of them stop at the same step.
  virtual std::vector<AllreduceTiming> run(Transport& transport, const CollectiveSetup& setup,
                                           const std::vector<AllreduceSize>& sizes) = 0;
};

// allreduce.<backend>: one result per size with busbw and algbw; `wrong_on[i]`: the ranks whose sum was wrong
// at size i (FAIL).
std::vector<CheckResult> grade_allreduce(const std::string& backend, const std::vector<AllreduceTiming>& timings,
                                         int ranks, const std::vector<std::vector<std::string>>& wrong_on);

// Collective over all members: runs `backend` when every member can, else rank 0 reports a SKIP with the
// reasons. Rank 0 returns the whole-run results; the others return nothing. `progress` may be empty.
std::vector<CheckResult> check_allreduce(Transport& transport, AllreduceBackend& backend,
                                         const CollectiveSetup& setup, const std::vector<AllreduceSize>& sizes,
                                         const std::function<void(const std::string&)>& progress);

}  // namespace ddp::doctor
