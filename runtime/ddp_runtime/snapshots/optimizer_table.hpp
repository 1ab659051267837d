#pragma once
// Kept beside the snapshots: most of an entry is a snapshot's layout, which snapshot.cpp reads; optimizer.cpp fills it.
// The optimizers ddp-train knows, one entry each in optimizer.cpp's table: how LibTorch makes one, how its state per
// parameter is kept in torch.optim's state_dict layout, and its param group in a snapshot (the keys torch.optim's
// optimizer puts there, so that Python's optimizer.load_state_dict accepts the group whatever its version, how they
// are read back, and the hyperparameters the snapshot's checksum covers). A new optimizer is an OptimizerKind, its
// name in cli.cpp's table of names, and an entry there.
#include <ATen/core/Dict.h>
#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <vector>

#include "ddp_runtime/snapshots/snapshot.hpp"
#include "ddp_runtime/train_options.hpp"

namespace torch::optim {
class Optimizer;
class OptimizerParamState;
}  // namespace torch::optim

namespace ddp::runtime {

struct OptimizerEntry {
  OptimizerKind kind;
  const char* own_key;  // a param-group key only this optimizer has: how a group read back is told apart
  std::unique_ptr<torch::optim::Optimizer> (*make)(const std::vector<at::Tensor>& params, const OptimizerOptions& o);
  // A parameter's state as torch.optim names it ("momentum_buffer"; "step", "exp_avg", "exp_avg_sq").
  NamedTensors (*saved)(const torch::optim::OptimizerParamState& state);
  // That state back, for `param`; throws ddp::Error naming `source` when a tensor is missing or of another shape.
  std::unique_ptr<torch::optim::OptimizerParamState> (*restore)(const NamedTensors& saved, const at::Tensor& param,
                                                                const std::string& source);
  std::vector<double> (*hyperparameters)(const OptimizerState& o);              // its own, in the checksum's order
  void (*write_group)(c10::impl::GenericDict& group, const OptimizerState& o);  // its keys between lr and initial_lr
  // Its own hyperparameters from a group read from `path`; throws SnapshotCorrupt.
  void (*read_group)(const c10::impl::GenericDict& group, OptimizerState& o, const std::string& path);
};

const OptimizerEntry& optimizer_entry(OptimizerKind kind);
// The entry whose own key `group` holds; throws SnapshotCorrupt naming `path` and the keys looked for.
const OptimizerEntry& optimizer_entry_of_group(const c10::impl::GenericDict& group, const std::string& path);

}  // namespace ddp::runtime
