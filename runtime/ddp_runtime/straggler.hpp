#pragma once
// Stragglers named: one slow rank (a throttled GPU, a noisy neighbour, a bad NIC) slows every rank of a DDP run,
// since each step waits for the slowest. Each rank measures its own compute per step, without the time it waits
// for its peers: forward and backward until its last gradient is computed (a hook on every parameter's gradient),
// plus the optimizer step. The all-reduce of the last bucket and the wait for it are left out. Once per epoch the
// ranks share their mean compute per step (one all-reduce of one number per rank), and rank 0 prints every rank
// slower than the median by more than the threshold, with its node and device:
//   Epoch 3 | Straggler: rank 2 on node2 (cpu) computes 2.41x the median (12.3 ms against 5.1 ms per step; threshold
//   20%)
// With --json, rank 0 also prints the epoch's scores (compute ÷ median) of every rank as one JSON line:
//   {"event": "stragglers", "epoch": 3, "median_compute_ms": 5.1, "threshold_pct": 20, "ranks": [{"rank": 0,
//    "host": "node1", "device": "cpu", "compute_ms": 5.0, "score": 0.98}, ...], "stragglers": [2]}
// Times are the host's wall clock: on a GPU they cover launching the work, not running it.
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ddp_runtime/process_group.hpp"
#include "ddp_runtime/rank_identity.hpp"

namespace torch::nn {
class Module;
}

namespace ddp::runtime {

struct StragglerSettings {
  double threshold_pct = 20.0;  // slower than the median by more than this: named
  bool json = false;
};

// The ranks slower than the median of `compute` by more than `threshold_pct` percent. The median of an even count
// is the mean of the two middle values. Ranks with no measurement (0) are neither measured against nor named.
std::vector<int> slower_than_median(const std::vector<double>& compute, double threshold_pct, double* median);

class StragglerMonitor {
 public:
  using Print = std::function<void(const std::string&)>;
  StragglerMonitor(const Distributed& dist, std::vector<RankIdentity> ranks, StragglerSettings settings, Print print);
  ~StragglerMonitor();

  // Hooks on the gradients of the model's parameters; call once, before the first step.
  void attach(const std::vector<at::Tensor>& parameters);
  void step_started();
  void backward_finished();  // before the optimizer step
  void step_finished();
  // Collective (every rank, at the same point): shares the epoch's compute; rank 0 prints. Starts the next epoch.
  void end_epoch(int64_t epoch);

  // The mean wall time of a step (compute and waiting) over the last epoch; zero before one ended.
  std::chrono::milliseconds mean_step() const { return mean_step_; }
  const std::vector<RankIdentity>& ranks() const { return ranks_; }

 private:
  struct Clocks;
  const Distributed& dist_;
  std::vector<RankIdentity> ranks_;
  StragglerSettings settings_;
  Print print_;
  std::shared_ptr<Clocks> clocks_;  // shared with the gradient hooks
  std::chrono::milliseconds mean_step_{0};
};

}  // namespace ddp::runtime
