#include "ddp_runtime/training/optimizer.hpp"

#include <torch/types.h>  // clip_grad.h uses it without including it

#include <ATen/ops/scalar_tensor.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "base/command_line.hpp"
#include "core/error.hpp"
#include "ddp_runtime/common/c10d_compat.hpp"
#include "ddp_runtime/snapshots/optimizer_table.hpp"
#include "ddp_runtime/snapshots/saved_value.hpp"
#include "ddp_runtime/training/kind_table.hpp"

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

// --- the optimizers: optimizer_table.hpp says what an entry holds. ---

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

std::vector<double> sgd_hyperparameters(const OptimizerState& o) { return {o.momentum}; }

void write_sgd_group(c10::impl::GenericDict& group, const OptimizerState& o) {
  group.insert("momentum", o.momentum);
  group.insert("dampening", 0.0);
  group.insert("weight_decay", o.weight_decay);
  group.insert("nesterov", false);
  group.insert("maximize", false);
  group.insert("foreach", c10::IValue());
  group.insert("differentiable", false);
  group.insert("fused", c10::IValue());
}

void read_sgd_group(const c10::impl::GenericDict& group, OptimizerState& o, const std::string& path) {
  o.momentum = saved_number(saved_entry(group, "momentum", path), "momentum", path);
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

std::vector<double> adamw_hyperparameters(const OptimizerState& o) { return {o.beta1, o.beta2, o.eps}; }

void write_adamw_group(c10::impl::GenericDict& group, const OptimizerState& o) {
  group.insert("betas", c10::ivalue::Tuple::create(o.beta1, o.beta2));
  group.insert("eps", o.eps);
  group.insert("weight_decay", o.weight_decay);
  group.insert("amsgrad", false);
  group.insert("maximize", false);
  group.insert("foreach", c10::IValue());
  group.insert("capturable", false);
  group.insert("differentiable", false);
  group.insert("fused", c10::IValue());
}

void read_adamw_group(const c10::impl::GenericDict& group, OptimizerState& o, const std::string& path) {
  const c10::IValue betas = saved_entry(group, "betas", path);
  const std::vector<c10::IValue> pair = betas.isTuple() ? betas.toTupleRef().elements().vec() : betas.toList().vec();
  if (pair.size() != 2) throw SnapshotCorrupt(path + ": betas is not a pair");
  o.beta1 = saved_number(pair[0], "betas", path);
  o.beta2 = saved_number(pair[1], "betas", path);
  o.eps = saved_number(saved_entry(group, "eps", path), "eps", path);
}

const OptimizerEntry kOptimizerEntries[] = {
    {OptimizerKind::Sgd, "momentum", make_sgd, saved_sgd, restore_sgd, sgd_hyperparameters, write_sgd_group,
     read_sgd_group},
    {OptimizerKind::AdamW, "betas", make_adamw, saved_adamw, restore_adamw, adamw_hyperparameters, write_adamw_group,
     read_adamw_group},
};

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
  return entry_of(kScheduleEntries, o.schedule, "schedule", "the table of schedules (optimizer.cpp)")
      .lr(o, step, epoch, total_steps);
}

const OptimizerEntry& optimizer_entry(OptimizerKind kind) {
  return entry_of(kOptimizerEntries, kind, "optimizer", "the table of optimizers (optimizer.cpp)");
}

const OptimizerEntry& optimizer_entry_of_group(const c10::impl::GenericDict& group, const std::string& path) {
  std::vector<std::string> keys;
  for (const OptimizerEntry& entry : kOptimizerEntries) {
    if (group.contains(entry.own_key)) return entry;
    keys.emplace_back(entry.own_key);
  }
  throw SnapshotCorrupt(path + ": the optimizer's param group has none of " + cli::listed(keys));
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

namespace {

std::string number(double value) {
  std::ostringstream text;
  text << value;
  return text.str();
}

}  // namespace

std::vector<std::string> Optimizer::changed_hyperparameters(const OptimizerState& saved) const {
  struct Value {
    const char* option;
    std::string now;
    std::string then;
  };
  std::vector<Value> values{{"--lr", number(options_.lr), number(saved.initial_lr)},
                            {"--weight-decay", number(options_.decay()), number(saved.weight_decay)}};
  if (options_.kind == OptimizerKind::Sgd)
    values.push_back({"--momentum", number(options_.momentum), number(saved.momentum)});
  if (options_.kind == OptimizerKind::AdamW) {
    values.push_back({"--betas", number(options_.beta1) + "," + number(options_.beta2),
                      number(saved.beta1) + "," + number(saved.beta2)});
    values.push_back({"--eps", number(options_.eps), number(saved.eps)});
  }
  std::vector<std::string> changed;
  for (const Value& value : values) {
    if (value.now != value.then)
      changed.push_back(std::string(value.option) + " " + value.now + " (" + value.then + " in the snapshot)");
  }
  return changed;
}

}  // namespace ddp::runtime
