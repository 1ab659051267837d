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

}  // namespace ddp::runtime
