#include "ddp_runtime/sampler.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ops/randperm.h>

#include <numeric>

#include "error.hpp"

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

}  // namespace ddp::runtime
