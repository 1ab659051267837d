#include "ddp_runtime/straggler.hpp"

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <atomic>
#include <cstdio>

#include "json_string.hpp"

namespace ddp::runtime {
namespace {

using Clock = std::chrono::steady_clock;
using Seconds = std::chrono::duration<double>;

std::string fixed(double value, int decimals) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", decimals, value);
  return text;
}

}  // namespace

struct StragglerMonitor::Clocks {
  std::atomic<Clock::rep> last_gradient{0};  // when the step's latest gradient was computed; 0: none yet
  Clock::time_point step_start;
  Clock::time_point backward_end;
  double compute_seconds = 0;  // this epoch
  double wall_seconds = 0;
  int64_t steps = 0;
};

std::vector<int> slower_than_median(const std::vector<double>& compute, double threshold_pct, double* median) {
  std::vector<double> measured;
  for (const double value : compute) {
    if (value > 0) measured.push_back(value);
  }
  *median = 0;
  if (measured.empty()) return {};
  std::sort(measured.begin(), measured.end());
  const std::size_t middle = measured.size() / 2;
  *median = measured.size() % 2 ? measured[middle] : (measured[middle - 1] + measured[middle]) / 2;
  std::vector<int> slow;
  for (std::size_t rank = 0; rank < compute.size(); ++rank) {
    if (compute[rank] > *median * (1 + threshold_pct / 100)) slow.push_back(static_cast<int>(rank));
  }
  return slow;
}

StragglerMonitor::StragglerMonitor(const Distributed& dist, std::vector<RankIdentity> ranks, StragglerSettings settings,
                                   Print print)
    : dist_(dist),
      ranks_(std::move(ranks)),
      settings_(settings),
      print_(std::move(print)),
      clocks_(std::make_shared<Clocks>()) {}

StragglerMonitor::~StragglerMonitor() = default;

void StragglerMonitor::attach(const std::vector<at::Tensor>& parameters) {
  for (at::Tensor param : parameters) {
    if (!param.requires_grad()) continue;
    // The hooks may outlive this monitor (they live as long as the parameters): they hold the clocks themselves.
    param.register_hook([clocks = clocks_](auto&&) {
      clocks->last_gradient.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
    });
  }
}

void StragglerMonitor::step_started() {
  clocks_->last_gradient.store(0, std::memory_order_relaxed);
  clocks_->step_start = Clock::now();
}

void StragglerMonitor::backward_finished() { clocks_->backward_end = Clock::now(); }

void StragglerMonitor::step_finished() {
  Clocks& c = *clocks_;
  const auto now = Clock::now();
  const Clock::rep last = c.last_gradient.load(std::memory_order_relaxed);
  const Clock::time_point gradients_done = last != 0 ? Clock::time_point(Clock::duration(last)) : c.backward_end;
  c.compute_seconds += Seconds(gradients_done - c.step_start).count() + Seconds(now - c.backward_end).count();
  c.wall_seconds += Seconds(now - c.step_start).count();
  ++c.steps;
}

void StragglerMonitor::end_epoch(int64_t epoch) {
  Clocks& c = *clocks_;
  at::Tensor compute_ms = at::zeros({dist_.world_size}, at::kDouble);
  if (c.steps > 0) compute_ms[dist_.rank] = c.compute_seconds * 1000 / static_cast<double>(c.steps);
  if (dist_.world_size > 1) all_reduce_sum(dist_, compute_ms);
  if (c.steps > 0) {
    mean_step_ = std::chrono::milliseconds(static_cast<int64_t>(c.wall_seconds * 1000 / static_cast<double>(c.steps)));
  }
  c.compute_seconds = c.wall_seconds = 0;
  c.steps = 0;
  if (dist_.rank != 0) return;

  const std::vector<double> compute(compute_ms.data_ptr<double>(), compute_ms.data_ptr<double>() + dist_.world_size);
  double median = 0;
  const std::vector<int> slow = slower_than_median(compute, settings_.threshold_pct, &median);
  const std::string threshold = fixed(settings_.threshold_pct, settings_.threshold_pct < 10 ? 1 : 0) + "%";
  for (const int rank : slow) {
    print_("Epoch " + std::to_string(epoch) + " | Straggler: " + describe_rank(ranks_, rank) + " computes " +
           fixed(compute[rank] / median, 2) + "x the median (" + fixed(compute[rank], 1) + " ms against " +
           fixed(median, 1) + " ms per step; threshold " + threshold + ")");
  }
  if (!settings_.json) return;
  std::string ranks;
  for (int rank = 0; rank < dist_.world_size; ++rank) {
    const RankIdentity identity = static_cast<std::size_t>(rank) < ranks_.size() ? ranks_[rank] : RankIdentity{};
    ranks += std::string(rank ? ", " : "") + "{\"rank\": " + std::to_string(rank) +
             ", \"host\": " + json_string(identity.host) + ", \"device\": " + json_string(identity.device) +
             ", \"compute_ms\": " + fixed(compute[rank], 3) +
             ", \"score\": " + fixed(median > 0 ? compute[rank] / median : 0, 3) + "}";
  }
  std::string named;
  for (const int rank : slow) named += (named.empty() ? "" : ", ") + std::to_string(rank);
  print_("{\"event\": \"stragglers\", \"epoch\": " + std::to_string(epoch) +
         ", \"median_compute_ms\": " + fixed(median, 3) + ", \"threshold_pct\": " + fixed(settings_.threshold_pct, 1) +
         ", \"ranks\": [" + ranks + "], \"stragglers\": [" + named + "]}");
}

}  // namespace ddp::runtime
