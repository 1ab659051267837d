#pragma once
// torch.optim's SGD and AdamW (LibTorch's implementations, the same updates), with torch.nn.utils.clip_grad_norm_
// before each step, a learning-rate schedule, and the optimizer's state in torch.optim's state_dict layout.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "ddp_runtime/snapshots/snapshot.hpp"
#include "ddp_runtime/train_options.hpp"

namespace torch::optim {
class Optimizer;
}

namespace ddp::runtime {

// The learning rate of optimizer step `step` (0-based; fractional after the world changed in place, where a step of
// fewer ranks counts as that share of a planned one) in epoch `epoch` of a run of `total_steps` steps:
//   constant  lr
//   step      lr * gamma ^ floor(epoch / step_epochs)          (StepLR stepped once per epoch)
//   cosine    step < W: lr * step / W; then lr * max(0, (1 + cos(pi * (step - W) / (total_steps - W))) / 2)
//             (transformers' get_cosine_schedule_with_warmup: LambdaLR stepped once per optimizer step)
double scheduled_lr(const OptimizerOptions& options, double step, int64_t epoch, int64_t total_steps);

class Optimizer {
 public:
  // One param group holding `params`, in order (torch.optim's state keys are their positions).
  Optimizer(std::vector<at::Tensor> params, const OptimizerOptions& options);
  ~Optimizer();
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  void set_lr(double lr);
  // Clips the gradients' total norm when --clip-grad-norm is set, then updates the parameters.
  void step();
  // The live state tensors, not copies.
  OptimizerState state() const;
  // Copies a saved state in; throws ddp::Error naming `source` when it is another optimizer's or another model's.
  void load(const OptimizerState& saved, const std::string& source);
  // The options whose values differ from those `saved` was written with (same kind of optimizer), each as
  // "--lr 0.05 (0.01 in the snapshot)"; empty when none does.
  std::vector<std::string> changed_hyperparameters(const OptimizerState& saved) const;

 private:
  std::vector<at::Tensor> params_;
  OptimizerOptions options_;
  std::unique_ptr<torch::optim::Optimizer> impl_;
};

}  // namespace ddp::runtime
