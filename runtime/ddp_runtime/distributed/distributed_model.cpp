#include "ddp_runtime/distributed/distributed_model.hpp"

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

// The Reducer averages a gradient that is its bucket's view in place, divided by the world size, and copies any
// other into its bucket multiplied by 1 / world size, which differs in the last bit for 3 ranks or more. A gradient
// that exists when the Reducer lays out its buckets becomes its bucket's view, so that every step divides, the
// first one of a process included (autograd would make its gradients anew).
void start_gradients_in_buckets(const std::vector<at::Tensor>& params) {
  for (const at::Tensor& param : params) {
    if (!param.grad().defined()) param.mutable_grad() = at::zeros_like(param);
  }
}

}  // namespace

DistributedModel::DistributedModel(const std::shared_ptr<torch::nn::Module>& module, const Distributed& dist,
                                   DdpOptions options)
    : DistributedModel(named(module->named_parameters()), module->buffers(), dist, options) {}

DistributedModel::DistributedModel(const NamedTensors& parameters, std::vector<at::Tensor> buffers,
                                   const Distributed& dist, DdpOptions options)
    : group_(dist.group), buffers_(std::move(buffers)) {
  std::vector<at::Tensor> params;
  for (const auto& [name, param] : parameters) {
    if (param.requires_grad()) params.push_back(param);
  }
  c10d::verify_params_across_processes(group_, params, c10::nullopt);
  std::vector<at::Tensor> states = params;
  states.insert(states.end(), buffers_.begin(), buffers_.end());
  broadcast_from_rank0(group_, states);
  if (options.gradient_as_bucket_view) start_gradients_in_buckets(params);

  // The Reducer takes the parameters in reverse order of definition: the order in which a chain of layers makes
  // their gradients ready, and so the order of the buckets, the first (small) one holding the last layers.
  std::reverse(params.begin(), params.end());
  std::unordered_map<std::size_t, std::string> names;
  for (const auto& [name, param] : parameters) {
    if (param.requires_grad()) names.emplace(params.size() - 1 - names.size(), name);
  }
  const std::vector<std::size_t> caps{static_cast<std::size_t>(options.first_bucket_bytes_cap),
                                      static_cast<std::size_t>(options.bucket_bytes_cap)};
  auto [buckets, limits] =
      c10d::compute_bucket_assignment_by_size(params, caps, std::vector<bool>(params.size(), false));
  bucket_count_ = buckets.size();
  compat::ReducerConfig config{std::move(buckets),
                               std::move(limits),
                               options.bucket_bytes_cap,
                               options.first_bucket_bytes_cap,
                               options.gradient_as_bucket_view,
                               std::move(names)};
  reducer_ = compat::make_reducer(params, std::move(config), group_);
  // PyTorch's DDP rebuilds the buckets once, after the first iteration, in the order the gradients became ready.
  // Each bucket's layout decides how Gloo's ring cuts it, and so the order in which 3 ranks or more sum each
  // gradient: a process's first step would not sum as every later step does, and a resumed run (or one regrouped
  // in place) would end a few ULPs off the uninterrupted one. The buckets are "rebuilt" here, in the order above
  // and the same layout: they stay so, in every process, and resuming is exact for any model.
  reducer_->push_rebuilt_params_for_all_indices();
  reducer_->rebuild_buckets();
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
  // DDP's broadcast_buffers: rank 0's buffers (batch-norm statistics and the like) win before every forward.
  if (group_->getSize() > 1) broadcast_from_rank0(group_, buffers_);
}

void DistributedModel::after_forward() {
  if (at::GradMode::is_enabled() && sync_) reducer_->prepare_for_backward({});
}

}  // namespace ddp::runtime
