#pragma once
// torch.utils.data.distributed.DistributedSampler, index for index: a permutation seeded with seed + epoch
// (the same torch.randperm on the same generator), padded by repeating its head so that every rank gets
// ceil(N / world) samples (or truncated with drop_last), then every world-th index from this rank's offset.
#include <cstdint>
#include <vector>

namespace ddp::runtime {

class DistributedSampler {
 public:
  DistributedSampler(int64_t dataset_size, int num_replicas, int rank, bool shuffle = true, uint64_t seed = 0,
                     bool drop_last = false);

  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  std::vector<int64_t> indices() const;
  // The epoch's order that every rank shares, before padding and before each rank takes its share.
  std::vector<int64_t> order() const { return permutation(); }
  int64_t num_samples() const { return num_samples_; }

 private:
  std::vector<int64_t> permutation() const;

  int64_t dataset_size_;
  int num_replicas_;
  int rank_;
  bool shuffle_;
  uint64_t seed_;
  bool drop_last_;
  int64_t epoch_ = 0;
  int64_t num_samples_;
  int64_t total_size_;
};

// One rank's share of an epoch as optimizer steps: each step is one or more batches (gradient accumulation), each
// batch a span of `samples`.
struct BatchSpan {
  int64_t start = 0;
  int64_t size = 0;
};
struct EpochPlan {
  std::vector<int64_t> samples;               // this rank's samples, in the order it trains them
  std::vector<std::vector<BatchSpan>> steps;  // each step's batches
};

// DistributedSampler's share of this rank (`indices`), in batches of `batch` (the last one shorter) taken
// `accumulate` at a time: what a DataLoader over the sampler gives, step by step.
EpochPlan plan_epoch(std::vector<int64_t> indices, int64_t batch, int64_t accumulate);

// The rest of an epoch whose first `consumed` samples of `order` (the order every rank shares) were trained, over
// `world` ranks: after a rank was lost or one joined, mid-epoch. No sample of the rest is trained twice and none is
// left out (DistributedSampler would pad the rest with repeats): the rest is cut into global steps of `world` x
// `accumulate` x `batch` samples, of which each rank takes every world-th one (the sampler's interleaving), in
// `accumulate` batches of `batch`. The last step's samples are shared out as evenly as possible (ranks differ by
// at most one sample, every rank takes the same number of batches, which may then hold one sample more than
// `batch`); when fewer than `world` samples would be left for it, they join the step before. Only when fewer
// samples than ranks remain in the whole rest are some repeated, so that every rank has one.
EpochPlan plan_rest_of_epoch(const std::vector<int64_t>& order, int64_t consumed, int world, int rank, int64_t batch,
                             int64_t accumulate);

}  // namespace ddp::runtime
