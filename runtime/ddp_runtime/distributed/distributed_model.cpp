#include "ddp_runtime/distributed_model.hpp"

#include <ATen/core/grad_mode.h>
#include <torch/nn/module.h>
#include <torch/csrc/distributed/c10d/comm.hpp>
#include <torch/csrc/distributed/c10d/reducer.hpp>

#include <algorithm>

namespace ddp::runtime {
namespace {

// torch.nn.parallel.DistributedDataParallel's broadcast_bucket_size for module states.
constexpr std::size_t kBroadcastBucketBytes = 250 * 1024 * 1024;

NamedTensors named(const torch::OrderedDict<std::string, at::Tensor>& items) {
  NamedTensors result;
  for (const auto& item : items) result.emplace_back(item.key(), item.value());
  return result;
}

void broadcast_from_rank0(const compat::ProcessGroupPtr& group, const std::vector<at::Tensor>& tensors) {
  if (tensors.empty()) return;
  at::NoGradGuard no_grad;
  c10d::broadcast_coalesced(group, tensors, kBroadcastBucketBytes, 0);
}

}  // namespace

DistributedModel::DistributedModel(const std::shared_ptr<torch::nn::Module>& module, const Distributed& dist,
                                   DdpOptions options)
    : DistributedModel(named(module->named_parameters()), module->buffers(), dist, options) {}

DistributedModel::DistributedModel(const NamedTensors& parameters, std::vector<at::Tensor> buffers,
                                   const Distributed& dist, DdpOptions options)
    : group_(dist.group), buffers_(std::move(buffers)) {
  std::vector<at::Tensor> params;
  std::unordered_map<std::size_t, std::string> names;
  for (const auto& [name, param] : parameters) {
    if (!param.requires_grad()) continue;
    names.emplace(params.size(), name);
    params.push_back(param);
  }
  c10d::verify_params_across_processes(group_, params, c10::nullopt);
  std::vector<at::Tensor> states = params;
  states.insert(states.end(), buffers_.begin(), buffers_.end());
  broadcast_from_rank0(group_, states);

  const std::vector<std::size_t> caps{static_cast<std::size_t>(options.first_bucket_bytes_cap),
                                      static_cast<std::size_t>(options.bucket_bytes_cap)};
  auto [buckets, limits] =
      c10d::compute_bucket_assignment_by_size(params, caps, std::vector<bool>(params.size(), false));
  // Gradients become ready roughly in reverse order of definition; DDP reverses the buckets to match, and after
  // the first iteration the Reducer rebuilds them in the order actually observed.
  std::reverse(buckets.begin(), buckets.end());
  std::reverse(limits.begin(), limits.end());
  bucket_count_ = buckets.size();
  compat::ReducerConfig config{std::move(buckets),
                               std::move(limits),
                               options.bucket_bytes_cap,
                               options.first_bucket_bytes_cap,
                               options.gradient_as_bucket_view,
                               std::move(names)};
  reducer_ = compat::make_reducer(params, std::move(config), group_);
}

DistributedModel::~DistributedModel() = default;

void zero_gradients(const std::vector<at::Tensor>& parameters) {
  for (const at::Tensor& param : parameters) {
    if (param.grad().defined()) param.mutable_grad().zero_();
  }
}

void zero_gradients(torch::nn::Module& module) { zero_gradients(module.parameters()); }

void DistributedModel::before_forward() {
  if (!at::GradMode::is_enabled()) return;
  if (sync_) reducer_->prepare_for_forward();
  reducer_->rebuild_buckets();
  // DDP's broadcast_buffers: rank 0's buffers (batch-norm statistics and the like) win before every forward.
  if (group_->getSize() > 1) broadcast_from_rank0(group_, buffers_);
}

void DistributedModel::after_forward() {
  if (at::GradMode::is_enabled() && sync_) reducer_->prepare_for_backward({});
}

}  // namespace ddp::runtime
