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
//
// A compute score misses a rank that is slow where the all-reduce runs: a rank stopped or throttled around the
// collective computes at normal speed, and in a ring the late rank even has the shortest collective, since the
// punctual ranks absorb the wait. So each rank also records when it arrives at the step's all-reduce (its backward
// pass has produced its last gradient, which launches its last bucket: from then on only its peers can hold the step
// up) and how long it then waits until the all-reduce completes. The collective completes on every rank at about the
// same moment, so that moment is a clock the ranks share without exchanging time: a rank's arrival is its wait
// before it, and a rank that waits less than the others arrived later. Time the rank itself did not run while it
// waited (stopped, throttled by a CPU quota, or waiting for a core: a thread of its own sees the gaps) is time its
// peers waited for its data: it is taken off its wait, as if it had arrived that much later. Once per epoch, in the
// same all-reduce as the compute, rank 0 names every rank whose mean wait is shorter than the median wait of all
// ranks by more than the threshold, as a share of the median step. The reference is the median of all ranks, as for
// the compute: with two ranks it is their mean, so each is measured by half their difference; against the other
// rank alone, two ranks that kept pace but computed 15% apart (this much noise is common) would be named. The waits are
// compared step by step in groups: each rank keeps its mean wait over every fifth step (five interleaved groups of the
// same steps on every rank), a rank's lateness is the median of its lateness in the five, so one step that held a rank
// up (a page fault, a core taken for a moment) moves one group, while a rank slowed all along (stopped or throttled at
// a period of its own) is late in each:
//   Epoch 3 | Late arrival: rank 1 on node2 (cpu) reaches the all-reduce 8.3 ms after the median rank (49% of a
//   17.0 ms step; threshold 20%)
// and --json adds each rank's "wait_ms", "arrival_ms" (how much later than the median rank it arrived) and
// "arrival_score" (that share of the median step), and the list "late".
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ddp_runtime/distributed/process_group.hpp"
#include "ddp_runtime/distributed/rank_identity.hpp"

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

// How much later each rank arrived at the collectives than the median rank: the median of all measured ranks'
// `wait` less its own (negative: earlier). Ranks whose wait is negative were not measured: their lateness is 0, and
// they are left out of the median; with fewer than two measured, every lateness is 0.
std::vector<double> arrival_lateness(const std::vector<double>& wait);

// The same over groups of steps: `wait_by_group[g][rank]` is a rank's mean wait over group g's steps (negative: not
// measured). A rank's lateness is the median, over the groups in which it and another rank were measured, of its
// lateness within the group (as arrival_lateness); 0 where there is none.
std::vector<double> arrival_lateness_by_group(const std::vector<std::vector<double>>& wait_by_group);

// The ranks whose lateness exceeds `threshold_pct` percent of `step` (the median step time).
std::vector<int> late_ranks(const std::vector<double>& lateness, double step, double threshold_pct);

class StragglerMonitor {
 public:
  using Print = std::function<void(const std::string&)>;
  StragglerMonitor(const Distributed& dist, std::vector<RankIdentity> ranks, StragglerSettings settings, Print print);
  ~StragglerMonitor();

  // Hooks on the gradients of the model's parameters; call once, before the first step.
  void attach(const std::vector<at::Tensor>& parameters);
  void step_started();
  void synchronised();       // backward returned: the step's all-reduce has completed
  void backward_finished();  // before the optimizer step
  void step_finished();
  // Collective (every rank, at the same point): shares the epoch's compute; rank 0 prints. Starts the next epoch.
  void end_epoch(int64_t epoch);
  // The group changed (recovery.hpp): these are its ranks now, and the epoch's measurements so far are dropped.
  void regrouped(std::vector<RankIdentity> ranks);

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
