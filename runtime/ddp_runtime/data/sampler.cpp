#include "ddp_runtime/data/sampler.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ops/randperm.h>

#include <algorithm>
#include <numeric>
#include <string>

#include "core/error.hpp"

namespace ddp::runtime {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

DistributedSampler::DistributedSampler(int64_t dataset_size, int num_replicas, int rank, bool shuffle, uint64_t seed,
                                       bool drop_last)
    : dataset_size_(dataset_size),
      num_replicas_(num_replicas),
      rank_(rank),
      shuffle_(shuffle),
      seed_(seed),
      drop_last_(drop_last) {
  if (num_replicas < 1 || rank < 0 || rank >= num_replicas) {
    throw Error("sampler rank " + std::to_string(rank) + " is outside [0, " + std::to_string(num_replicas) + ")");
  }
  // Python: ceil((N - world) / world) when dropping an uneven tail, else ceil(N / world).
  const bool uneven = dataset_size % num_replicas != 0;
  num_samples_ =
      drop_last && uneven ? ceil_div(dataset_size - num_replicas, num_replicas) : ceil_div(dataset_size, num_replicas);
  total_size_ = num_samples_ * num_replicas;
}

std::vector<int64_t> DistributedSampler::permutation() const {
  std::vector<int64_t> order(static_cast<std::size_t>(dataset_size_));
  if (!shuffle_) {
    std::iota(order.begin(), order.end(), 0);
    return order;
  }
  at::Generator generator = at::detail::createCPUGenerator(seed_ + static_cast<uint64_t>(epoch_));
  const at::Tensor perm = at::randperm(dataset_size_, generator, at::kLong);
  const int64_t* data = perm.data_ptr<int64_t>();
  std::copy(data, data + dataset_size_, order.begin());
  return order;
}

std::vector<int64_t> DistributedSampler::indices() const {
  std::vector<int64_t> order = permutation();
  if (drop_last_) {
    order.resize(static_cast<std::size_t>(total_size_));
  } else if (!order.empty()) {
    // Python repeats the whole list as often as needed, then cuts: for padding <= N that is its head.
    const std::size_t size = order.size();
    for (std::size_t i = 0; order.size() < static_cast<std::size_t>(total_size_); ++i) {
      const int64_t repeated = order[i % size];
      order.push_back(repeated);
    }
  }
  std::vector<int64_t> mine;
  mine.reserve(static_cast<std::size_t>(num_samples_));
  for (int64_t i = rank_; i < total_size_; i += num_replicas_) mine.push_back(order[static_cast<std::size_t>(i)]);
  return mine;
}

EpochPlan plan_epoch(std::vector<int64_t> indices, int64_t batch, int64_t accumulate) {
  EpochPlan plan;
  plan.samples = std::move(indices);
  const auto size = static_cast<int64_t>(plan.samples.size());
  for (int64_t start = 0; start < size;) {
    std::vector<BatchSpan> step;
    for (int64_t b = 0; b < accumulate && start < size; ++b, start += batch) {
      step.push_back({start, std::min(batch, size - start)});
    }
    plan.steps.push_back(std::move(step));
  }
  return plan;
}

namespace {

// Splits `count` samples from `start` into `parts` batches whose sizes differ by at most one.
std::vector<BatchSpan> even_batches(int64_t start, int64_t count, int64_t parts) {
  std::vector<BatchSpan> batches;
  for (int64_t p = 0; p < parts; ++p) {
    const int64_t size = count / parts + (p < count % parts ? 1 : 0);
    batches.push_back({start, size});
    start += size;
  }
  return batches;
}

}  // namespace

EpochPlan plan_rest_of_epoch(const std::vector<int64_t>& order, int64_t consumed, int world, int rank, int64_t batch,
                             int64_t accumulate) {
  if (world < 1 || rank < 0 || rank >= world || batch < 1 || accumulate < 1) {
    throw Error("plan_rest_of_epoch: rank " + std::to_string(rank) + " of " + std::to_string(world) + ", batch " +
                std::to_string(batch) + ", accumulate " + std::to_string(accumulate));
  }
  EpochPlan plan;
  const auto total = static_cast<int64_t>(order.size());
  if (consumed >= total) return plan;
  std::vector<int64_t> rest(order.begin() + std::max<int64_t>(consumed, 0), order.end());
  for (std::size_t i = 0; rest.size() < static_cast<std::size_t>(world); ++i) rest.push_back(rest[i]);
  const auto size = static_cast<int64_t>(rest.size());
  const int64_t per_step = static_cast<int64_t>(world) * batch * accumulate;
  int64_t steps = ceil_div(size, per_step);
  int64_t last = size - (steps - 1) * per_step;
  if (steps > 1 && last < world) {
    --steps;
    last += per_step;
  }
  for (int64_t s = 0; s < steps; ++s) {
    const int64_t begin = s * per_step;
    const int64_t count = s + 1 == steps ? last : per_step;
    const auto first = static_cast<int64_t>(plan.samples.size());
    for (int64_t i = begin + rank; i < begin + count; i += world) plan.samples.push_back(rest[i]);
    const int64_t mine = static_cast<int64_t>(plan.samples.size()) - first;
    if (count == per_step) {
      plan.steps.push_back(even_batches(first, mine, accumulate));
    } else {
      // Every rank takes as many batches as the smallest share fills, so that all run the same collectives.
      const int64_t fewest = count / world;
      plan.steps.push_back(even_batches(first, mine, std::clamp<int64_t>(ceil_div(fewest, batch), 1, accumulate)));
    }
  }
  return plan;
}

}  // namespace ddp::runtime
