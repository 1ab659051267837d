#include "ddp_runtime/optimizer.hpp"

#include <torch/types.h>  // clip_grad.h uses it without including it

#include <ATen/ops/scalar_tensor.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <algorithm>
#include <cmath>

#include "ddp_runtime/c10d_compat.hpp"
#include "error.hpp"

namespace ddp::runtime {
namespace {

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const std::vector<at::Tensor>& params,
                                                        const OptimizerOptions& o) {
  if (o.kind == OptimizerKind::AdamW) {
    return std::make_unique<torch::optim::AdamW>(
        params,
        torch::optim::AdamWOptions(o.lr).betas(std::make_tuple(o.beta1, o.beta2)).eps(o.eps).weight_decay(o.decay()));
  }
  return std::make_unique<torch::optim::SGD>(
      params, torch::optim::SGDOptions(o.lr).momentum(o.momentum).weight_decay(o.decay()));
}

const at::Tensor* find(const NamedTensors& tensors, const std::string& name) {
  for (const auto& [key, tensor] : tensors) {
    if (key == name) return &tensor;
  }
  return nullptr;
}

// A saved tensor for `param`: same shape, on its device, a copy of its own (the saved one may alias a file).
at::Tensor restored(const NamedTensors& saved, const std::string& name, const at::Tensor& param,
                    const std::string& source) {
  const at::Tensor* tensor = find(saved, name);
  if (tensor == nullptr || !tensor->defined() || tensor->sizes() != param.sizes()) {
    throw Error(source + ": the optimizer state has no " + name +
                " of the parameter's shape; resume with the model "
                "it was written with, or use another --snapshot-dir");
  }
  return tensor->to(param.device(), param.scalar_type()).clone();
}

}  // namespace

double scheduled_lr(const OptimizerOptions& o, double step, int64_t epoch, int64_t total_steps) {
  switch (o.schedule) {
    case LrSchedule::Constant: return o.lr;
    case LrSchedule::Step: return o.lr * std::pow(o.gamma, static_cast<double>(epoch / o.step_epochs));
    case LrSchedule::Cosine: {
      if (step < static_cast<double>(o.warmup_steps)) return o.lr * step / static_cast<double>(o.warmup_steps);
      const double progress = (step - static_cast<double>(o.warmup_steps)) /
                              static_cast<double>(std::max<int64_t>(1, total_steps - o.warmup_steps));
      return o.lr * std::max(0.0, 0.5 * (1.0 + std::cos(M_PI * progress)));
    }
  }
  return o.lr;
}

Optimizer::Optimizer(std::vector<at::Tensor> params, const OptimizerOptions& options)
    : params_(std::move(params)), options_(options), impl_(make_optimizer(params_, options)) {}

Optimizer::~Optimizer() = default;

void Optimizer::set_lr(double lr) {
  for (auto& group : impl_->param_groups()) group.options().set_lr(lr);
}

void Optimizer::step() {
  if (options_.clip_grad_norm > 0) torch::nn::utils::clip_grad_norm_(params_, options_.clip_grad_norm);
  impl_->step();
}

OptimizerState Optimizer::state() const {
  OptimizerState s;
  s.kind = options_.kind;
  s.lr = impl_->param_groups().front().options().get_lr();
  s.initial_lr = options_.lr;
  s.momentum = options_.momentum;
  s.weight_decay = options_.decay();
  s.beta1 = options_.beta1;
  s.beta2 = options_.beta2;
  s.eps = options_.eps;
  for (const at::Tensor& param : params_) {
    NamedTensors per_param;
    const auto* state = compat::optimizer_param_state(*impl_, param);
    if (state != nullptr && options_.kind == OptimizerKind::Sgd) {
      const auto& sgd = static_cast<const torch::optim::SGDParamState&>(*state);
      if (sgd.momentum_buffer().defined()) per_param.emplace_back("momentum_buffer", sgd.momentum_buffer());
    } else if (state != nullptr) {
      // torch.optim keeps AdamW's step count as a float32 tensor.
      const auto& adamw = static_cast<const torch::optim::AdamWParamState&>(*state);
      per_param.emplace_back("step", at::scalar_tensor(static_cast<double>(adamw.step()), at::kFloat));
      per_param.emplace_back("exp_avg", adamw.exp_avg());
      per_param.emplace_back("exp_avg_sq", adamw.exp_avg_sq());
    }
    s.per_param.push_back(std::move(per_param));
  }
  return s;
}

void Optimizer::load(const OptimizerState& saved, const std::string& source) {
  if (saved.kind != options_.kind) {
    throw Error(source + " holds the state of --optimizer " + to_string(saved.kind) + ", this run has --optimizer " +
                to_string(options_.kind) + "; resume with --optimizer " + to_string(saved.kind) +
                ", or use another --snapshot-dir");
  }
  if (saved.per_param.size() != params_.size()) {
    throw Error(source + " holds optimizer state for " + std::to_string(saved.per_param.size()) +
                " parameters, the model has " + std::to_string(params_.size()) +
                "; resume with the model it was written with, or use another --snapshot-dir");
  }
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const NamedTensors& entry = saved.per_param[i];
    const at::Tensor& param = params_[i];
    if (entry.empty()) continue;
    if (options_.kind == OptimizerKind::Sgd) {
      auto state = std::make_unique<torch::optim::SGDParamState>();
      state->momentum_buffer(restored(entry, "momentum_buffer", param, source));
      compat::set_optimizer_param_state(*impl_, param, std::move(state));
      continue;
    }
    const at::Tensor* step = find(entry, "step");
    if (step == nullptr || step->numel() != 1)
      throw Error(source + ": the AdamW state of a parameter has no step count");
    auto state = std::make_unique<torch::optim::AdamWParamState>();
    state->step(static_cast<int64_t>(std::llround(step->item<double>())));
    state->exp_avg(restored(entry, "exp_avg", param, source));
    state->exp_avg_sq(restored(entry, "exp_avg_sq", param, source));
    compat::set_optimizer_param_state(*impl_, param, std::move(state));
  }
}

}  // namespace ddp::runtime
