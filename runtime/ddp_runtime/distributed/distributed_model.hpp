#pragma once
// PyTorch's DistributedDataParallel for a C++ module: parameters and buffers broadcast from rank 0 and their
// shapes verified on every rank at construction; gradients averaged by c10d::Reducer in buckets whose
// all-reduce starts during backward, as soon as a bucket's gradients are ready; no_sync for accumulation.
// Unlike PyTorch's, the buckets are laid out once, at construction, in reverse order of definition, and every step
// divides the gradients alike: a new process's first step (a resumed run's) averages them bit for bit as the same
// step of an uninterrupted run, with any number of ranks.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "ddp_runtime/distributed/process_group.hpp"
#include "ddp_runtime/job.hpp"

namespace torch::nn {
class Module;
}

namespace ddp::runtime {

struct DdpOptions {
  int64_t bucket_bytes_cap = static_cast<int64_t>(kBucketCapMb * (1 << 20));
  // DDP keeps the first bucket small so that the gradients of the last layers, ready first, go on the wire
  // before the rest of backward has run.
  int64_t first_bucket_bytes_cap = kFirstBucketBytes;
  // DDP's gradient_as_bucket_view: gradients live in the buckets, saving a copy each way per step. Gradients
  // must then be zeroed in place (zero_gradients), not detached as torch::optim's zero_grad does.
  bool gradient_as_bucket_view = false;
};

// Optimizer.zero_grad's in-place zeroing, which bucket views allow.
void zero_gradients(const std::vector<at::Tensor>& parameters);
void zero_gradients(torch::nn::Module& module);

class DistributedModel {
 public:
  // The model's parameters (those that require gradients are synchronised, under their names) and buffers.
  DistributedModel(const NamedTensors& parameters, std::vector<at::Tensor> buffers, const Distributed& dist,
                   DdpOptions options = {});
  DistributedModel(const std::shared_ptr<torch::nn::Module>& module, const Distributed& dist, DdpOptions options = {});
  ~DistributedModel();
  DistributedModel(const DistributedModel&) = delete;
  DistributedModel& operator=(const DistributedModel&) = delete;

  // Runs the module's forward pass (run_module) under DDP's bookkeeping; the backward pass of a loss computed
  // from its output then averages the gradients over all ranks.
  template <class Forward>
  at::Tensor forward(Forward&& run_module) {
    before_forward();
    at::Tensor output = std::forward<Forward>(run_module)();
    after_forward();
    return output;
  }

  // While the guard lives, backward passes only accumulate local gradients; the first synchronised backward
  // after it averages the accumulated sums.
  class NoSync {
   public:
    explicit NoSync(DistributedModel& model) : model_(model), previous_(std::exchange(model.sync_, false)) {}
    ~NoSync() { model_.sync_ = previous_; }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DistributedModel& model_;
    bool previous_;
  };

  std::size_t bucket_count() const { return bucket_count_; }

 private:
  void before_forward();
  void after_forward();

  compat::ProcessGroupPtr group_;
  std::vector<at::Tensor> buffers_;
  std::shared_ptr<c10d::Reducer> reducer_;
  std::size_t bucket_count_ = 0;
  bool sync_ = true;
};

}  // namespace ddp::runtime
