#include "ddp_runtime/optimizer.hpp"

#include <torch/types.h>  // clip_grad.h uses it without including it

#include <ATen/ops/scalar_tensor.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "ddp_runtime/c10d_compat.hpp"

namespace ddp::runtime {
namespace {

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

// --- the optimizers: one table entry each, with how LibTorch makes it and how its state per parameter is kept in
// torch.optim's state_dict layout. A new optimizer is an OptimizerKind, its name in cli.cpp's table of names, an
// entry here, and its param group's keys in snapshot.cpp's table. ---
struct OptimizerEntry {
  OptimizerKind kind;
  std::unique_ptr<torch::optim::Optimizer> (*make)(const std::vector<at::Tensor>& params, const OptimizerOptions& o);
  // A parameter's state as torch.optim names it ("momentum_buffer"; "step", "exp_avg", "exp_avg_sq").
  NamedTensors (*saved)(const torch::optim::OptimizerParamState& state);
  // That state back, for `param`; throws ddp::Error naming `source` when a tensor is missing or of another shape.
  std::unique_ptr<torch::optim::OptimizerParamState> (*restore)(const NamedTensors& saved, const at::Tensor& param,
                                                                const std::string& source);
};

std::unique_ptr<torch::optim::Optimizer> make_sgd(const std::vector<at::Tensor>& params, const OptimizerOptions& o) {
  return std::make_unique<torch::optim::SGD>(
      params, torch::optim::SGDOptions(o.lr).momentum(o.momentum).weight_decay(o.decay()));
}

NamedTensors saved_sgd(const torch::optim::OptimizerParamState& state) {
  const auto& sgd = static_cast<const torch::optim::SGDParamState&>(state);
  NamedTensors saved;
  if (sgd.momentum_buffer().defined()) saved.emplace_back("momentum_buffer", sgd.momentum_buffer());
  return saved;
}

std::unique_ptr<torch::optim::OptimizerParamState> restore_sgd(const NamedTensors& saved, const at::Tensor& param,
                                                               const std::string& source) {
  auto state = std::make_unique<torch::optim::SGDParamState>();
  state->momentum_buffer(restored(saved, "momentum_buffer", param, source));
  return state;
}

std::unique_ptr<torch::optim::Optimizer> make_adamw(const std::vector<at::Tensor>& params, const OptimizerOptions& o) {
  return std::make_unique<torch::optim::AdamW>(
      params,
      torch::optim::AdamWOptions(o.lr).betas(std::make_tuple(o.beta1, o.beta2)).eps(o.eps).weight_decay(o.decay()));
}

NamedTensors saved_adamw(const torch::optim::OptimizerParamState& state) {
  const auto& adamw = static_cast<const torch::optim::AdamWParamState&>(state);
  // torch.optim keeps AdamW's step count as a float32 tensor.
  return {{"step", at::scalar_tensor(static_cast<double>(adamw.step()), at::kFloat)},
          {"exp_avg", adamw.exp_avg()},
          {"exp_avg_sq", adamw.exp_avg_sq()}};
}

std::unique_ptr<torch::optim::OptimizerParamState> restore_adamw(const NamedTensors& saved, const at::Tensor& param,
                                                                 const std::string& source) {
  const at::Tensor* step = find(saved, "step");
  if (step == nullptr || step->numel() != 1) throw Error(source + ": the AdamW state of a parameter has no step count");
  auto state = std::make_unique<torch::optim::AdamWParamState>();
  state->step(static_cast<int64_t>(std::llround(step->item<double>())));
  state->exp_avg(restored(saved, "exp_avg", param, source));
  state->exp_avg_sq(restored(saved, "exp_avg_sq", param, source));
  return state;
}

const OptimizerEntry kOptimizerEntries[] = {
    {OptimizerKind::Sgd, make_sgd, saved_sgd, restore_sgd},
    {OptimizerKind::AdamW, make_adamw, saved_adamw, restore_adamw},
};

const OptimizerEntry& optimizer_entry(OptimizerKind kind) {
  for (const OptimizerEntry& entry : kOptimizerEntries) {
    if (entry.kind == kind) return entry;
  }
  throw Error(std::string("the optimizer ") + to_string(kind) +
              " has no entry in the table of optimizers (optimizer.cpp)");
}

// --- the learning-rate schedules: one table entry each (scheduled_lr's contract in optimizer.hpp). A new schedule is
// an LrSchedule, its name in cli.cpp's table of names, and an entry here. ---
struct Schedule {
  LrSchedule kind;
  double (*lr)(const OptimizerOptions& o, double step, int64_t epoch, int64_t total_steps);
};

double constant_lr(const OptimizerOptions& o, double, int64_t, int64_t) { return o.lr; }

double step_lr(const OptimizerOptions& o, double, int64_t epoch, int64_t) {
  return o.lr * std::pow(o.gamma, static_cast<double>(epoch / o.step_epochs));
}

double cosine_lr(const OptimizerOptions& o, double step, int64_t, int64_t total_steps) {
  if (step < static_cast<double>(o.warmup_steps)) return o.lr * step / static_cast<double>(o.warmup_steps);
  const double progress = (step - static_cast<double>(o.warmup_steps)) /
                          static_cast<double>(std::max<int64_t>(1, total_steps - o.warmup_steps));
  return o.lr * std::max(0.0, 0.5 * (1.0 + std::cos(M_PI * progress)));
}

const Schedule kScheduleEntries[] = {
    {LrSchedule::Constant, constant_lr},
    {LrSchedule::Step, step_lr},
    {LrSchedule::Cosine, cosine_lr},
};

}  // namespace

double scheduled_lr(const OptimizerOptions& o, double step, int64_t epoch, int64_t total_steps) {
  for (const Schedule& schedule : kScheduleEntries) {
    if (schedule.kind == o.schedule) return schedule.lr(o, step, epoch, total_steps);
  }
  throw Error(std::string("the schedule ") + to_string(o.schedule) +
              " has no entry in the table of schedules (optimizer.cpp)");
}

Optimizer::Optimizer(std::vector<at::Tensor> params, const OptimizerOptions& options)
    : params_(std::move(params)), options_(options), impl_(optimizer_entry(options.kind).make(params_, options)) {}

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
  const OptimizerEntry& entry = optimizer_entry(options_.kind);
  for (const at::Tensor& param : params_) {
    const auto* state = compat::optimizer_param_state(*impl_, param);
    s.per_param.push_back(state != nullptr ? entry.saved(*state) : NamedTensors{});
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
  const OptimizerEntry& entry = optimizer_entry(options_.kind);
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (saved.per_param[i].empty()) continue;
    compat::set_optimizer_param_state(*impl_, params_[i], entry.restore(saved.per_param[i], params_[i], source));
  }
}

}  // namespace ddp::runtime
