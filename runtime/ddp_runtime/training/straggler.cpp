#include "ddp_runtime/training/straggler.hpp"

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <iterator>
#include <mutex>
#include <thread>

#include "base/json_string.hpp"

namespace ddp::runtime {
namespace {

using Clock = std::chrono::steady_clock;
using Seconds = std::chrono::duration<double>;

// The median of an even count is the mean of the two middle values; 0 of none.
double median_of(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const std::size_t middle = values.size() / 2;
  return values.size() % 2 ? values[middle] : (values[middle - 1] + values[middle]) / 2;
}

std::string fixed(double value, int decimals) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", decimals, value);
  return text;
}

}  // namespace

// How long this process did not run: a thread that wakes every kTick and counts, of each gap between two wakes, what
// exceeds kTick by more than kTolerance. SIGSTOP freezes every thread of the process, a CPU quota that ran out
// throttles them all, and an overloaded node leaves them waiting for a core: each shows as a gap. Time a rank spent
// frozen inside a collective is time its peers waited for it, although it had arrived: that time counts as late.
class StallClock {
 public:
  StallClock() : thread_([this] { run(); }) {}
  ~StallClock() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
  StallClock(const StallClock&) = delete;
  StallClock& operator=(const StallClock&) = delete;

  // Stalled time so far, the gap in progress included: after a stop or a throttled period, the thread that reads
  // may run before this clock's own thread has, and the time frozen must count at once (read under the mutex, so
  // that a gap is counted either in progress or recorded, never both).
  Clock::duration stalled() const {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto late = Clock::now() - last_ - kTick;
    return stalled_ + (late > kTolerance ? late : Clock::duration(0));
  }

 private:
  static constexpr std::chrono::milliseconds kTick{2};
  static constexpr std::chrono::milliseconds kTolerance{1};

  void run() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!wake_.wait_for(lock, kTick, [this] { return stop_; })) {
      const auto now = Clock::now();
      const auto late = now - last_ - kTick;
      if (late > kTolerance) stalled_ += late;
      last_ = now;
    }
  }

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  Clock::time_point last_ = Clock::now();  // this clock's thread's last wake
  Clock::duration stalled_{0};
  std::thread thread_;
};

constexpr int64_t kWarmUpSteps = 2;
// Step i's wait goes to group i mod kWaitGroups (straggler.hpp): odd, so that the median is one group's.
constexpr int kWaitGroups = 5;

struct StragglerMonitor::Clocks {
  std::atomic<Clock::rep> last_gradient{0};  // when the step's latest gradient was computed; 0: none yet
  Clock::time_point step_start;
  Clock::time_point synchronised;  // the step's all-reduce completed; time_point(): not this step
  Clock::duration stalled_at_synchronised{0};
  Clock::time_point backward_end;
  std::unique_ptr<StallClock> stall_clock;  // with peers only
  double compute_seconds = 0;               // this epoch
  double wall_seconds = 0;
  double wait_seconds = 0;  // from the arrival at the all-reduce to its end, less the time this rank was frozen
  // Zeroes the epoch's sums; a new process group also starts a new warm-up (regrouped()), a new epoch does not.
  void restart_epoch() {
    compute_seconds = wall_seconds = wait_seconds = 0;
    steps = waits = 0;
    group_wait_seconds = {};
    group_waits = {};
  }
  // When the step's last gradient was computed, by the stall clock; read by the gradient hooks' thread.
  std::atomic<Clock::rep> stalled_at_arrival{0};
  int64_t steps = 0;
  int64_t waits = 0;  // steps whose wait was measured
  std::array<double, kWaitGroups> group_wait_seconds{};
  std::array<int64_t, kWaitGroups> group_waits{};
  // The first steps after the group formed pay for one-off work (buffers allocated, buckets rebuilt) at different
  // moments on different ranks: their arrival says nothing of a rank's pace.
  int64_t warm_up_steps = kWarmUpSteps;
};

std::vector<int> slower_than_median(const std::vector<double>& compute, double threshold_pct, double* median) {
  std::vector<double> measured;
  for (const double value : compute) {
    if (value > 0) measured.push_back(value);
  }
  *median = median_of(measured);
  if (measured.empty()) return {};
  std::vector<int> slow;
  for (std::size_t rank = 0; rank < compute.size(); ++rank) {
    if (compute[rank] > *median * (1 + threshold_pct / 100)) slow.push_back(static_cast<int>(rank));
  }
  return slow;
}

std::vector<double> arrival_lateness(const std::vector<double>& wait) {
  std::vector<double> measured;
  std::copy_if(wait.begin(), wait.end(), std::back_inserter(measured), [](double w) { return w >= 0; });
  std::vector<double> lateness(wait.size(), 0.0);
  if (measured.size() < 2) return lateness;
  const double median = median_of(measured);
  for (std::size_t rank = 0; rank < wait.size(); ++rank) {
    if (wait[rank] >= 0) lateness[rank] = median - wait[rank];
  }
  return lateness;
}

std::vector<double> arrival_lateness_by_group(const std::vector<std::vector<double>>& wait_by_group) {
  const std::size_t world = wait_by_group.empty() ? 0 : wait_by_group.front().size();
  std::vector<std::vector<double>> within(world);  // each rank's lateness in each group it was measured in
  for (const std::vector<double>& wait : wait_by_group) {
    if (std::count_if(wait.begin(), wait.end(), [](double w) { return w >= 0; }) < 2) continue;
    const std::vector<double> lateness = arrival_lateness(wait);
    for (std::size_t rank = 0; rank < world; ++rank) {
      if (wait[rank] >= 0) within[rank].push_back(lateness[rank]);
    }
  }
  std::vector<double> lateness;
  for (const std::vector<double>& groups : within) lateness.push_back(median_of(groups));
  return lateness;
}

std::vector<int> late_ranks(const std::vector<double>& lateness, double step, double threshold_pct) {
  std::vector<int> late;
  if (step <= 0) return late;
  for (std::size_t rank = 0; rank < lateness.size(); ++rank) {
    if (lateness[rank] > step * threshold_pct / 100) late.push_back(static_cast<int>(rank));
  }
  return late;
}

StragglerMonitor::StragglerMonitor(const Distributed& dist, std::vector<RankIdentity> ranks, StragglerSettings settings,
                                   Print print)
    : dist_(dist),
      ranks_(std::move(ranks)),
      settings_(settings),
      print_(std::move(print)),
      clocks_(std::make_shared<Clocks>()) {
  if (dist.world_size > 1) clocks_->stall_clock = std::make_unique<StallClock>();
}

// The gradient hooks keep the clocks, not the thread.
StragglerMonitor::~StragglerMonitor() { clocks_->stall_clock.reset(); }

void StragglerMonitor::attach(const std::vector<at::Tensor>& parameters) {
  for (at::Tensor param : parameters) {
    if (!param.requires_grad()) continue;
    // The hooks may outlive this monitor (they live as long as the parameters): they hold the clocks themselves.
    param.register_hook([clocks = clocks_](auto&&) {
      clocks->last_gradient.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
      if (clocks->stall_clock) {
        clocks->stalled_at_arrival.store(clocks->stall_clock->stalled().count(), std::memory_order_relaxed);
      }
    });
  }
}

void StragglerMonitor::step_started() {
  clocks_->last_gradient.store(0, std::memory_order_relaxed);
  clocks_->step_start = Clock::now();
  clocks_->synchronised = Clock::time_point();
}

void StragglerMonitor::synchronised() {
  clocks_->synchronised = Clock::now();
  if (clocks_->stall_clock) clocks_->stalled_at_synchronised = clocks_->stall_clock->stalled();
}

void StragglerMonitor::backward_finished() { clocks_->backward_end = Clock::now(); }

void StragglerMonitor::step_finished() {
  Clocks& c = *clocks_;
  const auto now = Clock::now();
  const Clock::rep last = c.last_gradient.load(std::memory_order_relaxed);
  const Clock::time_point gradients_done = last != 0 ? Clock::time_point(Clock::duration(last)) : c.backward_end;
  c.compute_seconds += Seconds(gradients_done - c.step_start).count() + Seconds(now - c.backward_end).count();
  c.wall_seconds += Seconds(now - c.step_start).count();
  const int group = static_cast<int>(c.steps++ % kWaitGroups);
  if (c.warm_up_steps > 0) {
    --c.warm_up_steps;
  } else if (last != 0 && c.synchronised != Clock::time_point() && c.synchronised >= gradients_done) {
    const auto frozen =
        c.stalled_at_synchronised - Clock::duration(c.stalled_at_arrival.load(std::memory_order_relaxed));
    const double wait = std::max(0.0, Seconds(c.synchronised - gradients_done - frozen).count());
    c.wait_seconds += wait;
    ++c.waits;
    c.group_wait_seconds[group] += wait;
    ++c.group_waits[group];
  }
}

void StragglerMonitor::regrouped(std::vector<RankIdentity> ranks) {
  ranks_ = std::move(ranks);
  Clocks& c = *clocks_;
  c.restart_epoch();
  c.warm_up_steps = kWarmUpSteps;
}

void StragglerMonitor::end_epoch(int64_t epoch) {
  Clocks& c = *clocks_;
  const int world = dist_.world_size;
  // One all-reduce: every rank's compute, wait, step time and wait in each group of steps, in that order (a wait of
  // -1: not measured).
  const auto mean_ms = [](double seconds, int64_t count) { return count > 0 ? seconds * 1000 / count : -1.0; };
  at::Tensor shared = at::zeros({(3 + kWaitGroups) * world}, at::kDouble);
  if (c.steps > 0) {
    shared[dist_.rank] = mean_ms(c.compute_seconds, c.steps);
    shared[2 * world + dist_.rank] = mean_ms(c.wall_seconds, c.steps);
  }
  shared[world + dist_.rank] = mean_ms(c.wait_seconds, c.waits);
  for (int group = 0; group < kWaitGroups; ++group) {
    shared[(3 + group) * world + dist_.rank] = mean_ms(c.group_wait_seconds[group], c.group_waits[group]);
  }
  if (world > 1) all_reduce_sum(dist_, shared);
  if (c.steps > 0) mean_step_ = std::chrono::milliseconds(static_cast<int64_t>(mean_ms(c.wall_seconds, c.steps)));
  c.restart_epoch();
  if (dist_.rank != 0) return;

  const double* data = shared.data_ptr<double>();
  const std::vector<double> compute(data, data + world);
  const std::vector<double> wait(data + world, data + 2 * world);
  std::vector<std::vector<double>> wait_by_group;
  for (int group = 0; group < kWaitGroups; ++group) {
    const double* first = data + (3 + group) * world;
    wait_by_group.emplace_back(first, first + world);
  }
  std::vector<double> steps;
  for (int rank = 0; rank < world; ++rank) {
    if (data[2 * world + rank] > 0) steps.push_back(data[2 * world + rank]);
  }
  const double step = median_of(steps);
  double median = 0;
  const std::vector<int> slow = slower_than_median(compute, settings_.threshold_pct, &median);
  const std::vector<double> lateness = arrival_lateness_by_group(wait_by_group);
  const std::vector<int> late = late_ranks(lateness, step, settings_.threshold_pct);
  const std::string threshold = fixed(settings_.threshold_pct, settings_.threshold_pct < 10 ? 1 : 0) + "%";
  const std::string prefix = "Epoch " + std::to_string(epoch) + " | ";
  for (const int rank : slow) {
    print_(prefix + "Straggler: " + describe_rank(ranks_, rank) + " computes " + fixed(compute[rank] / median, 2) +
           "x the median (" + fixed(compute[rank], 1) + " ms against " + fixed(median, 1) + " ms per step; threshold " +
           threshold + ")");
  }
  for (const int rank : late) {
    print_(prefix + "Late arrival: " + describe_rank(ranks_, rank) + " reaches the all-reduce " +
           fixed(lateness[rank], 1) + " ms after the median rank (" + fixed(lateness[rank] / step * 100, 0) +
           "% of a " + fixed(step, 1) + " ms step; threshold " + threshold + ")");
  }
  if (!settings_.json) return;
  std::string ranks;
  for (int rank = 0; rank < world; ++rank) {
    const RankIdentity identity = static_cast<std::size_t>(rank) < ranks_.size() ? ranks_[rank] : RankIdentity{};
    ranks += std::string(rank ? ", " : "") + "{\"rank\": " + std::to_string(rank) +
             ", \"host\": " + json_string(identity.host) + ", \"device\": " + json_string(identity.device) +
             ", \"compute_ms\": " + fixed(compute[rank], 3) +
             ", \"score\": " + fixed(median > 0 ? compute[rank] / median : 0, 3) +
             ", \"wait_ms\": " + fixed(std::max(wait[rank], 0.0), 3) + ", \"arrival_ms\": " + fixed(lateness[rank], 3) +
             ", \"arrival_score\": " + fixed(step > 0 ? lateness[rank] / step : 0, 3) + "}";
  }
  const auto list = [](const std::vector<int>& items) {
    std::string text;
    for (const int rank : items) text += (text.empty() ? "" : ", ") + std::to_string(rank);
    return text;
  };
  print_("{\"event\": \"stragglers\", \"epoch\": " + std::to_string(epoch) +
         ", \"median_compute_ms\": " + fixed(median, 3) + ", \"median_step_ms\": " + fixed(step, 3) +
         ", \"threshold_pct\": " + fixed(settings_.threshold_pct, 1) + ", \"ranks\": [" + ranks +
         "], \"stragglers\": [" + list(slow) + "], \"late\": [" + list(late) + "]}");
}

}  // namespace ddp::runtime
