#pragma once
// What a training run trains: a model, the data set it learns from, and the loss between them. ddp-train's
// built-in workloads, a TorchScript module with data files (--model, --data) and programs of the C++ API
// (train.hpp) all hand the trainer one TrainingJob.
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ddp_runtime/train_options.hpp"

namespace torch::nn {
class AnyModule;
}

namespace ddp::runtime {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

class Model {
 public:
  virtual ~Model() = default;
  // The parameters in the order torch.optim receives them from nn.Module.parameters(), named as in the
  // module's state_dict; the same tensors on every call (the trainer keeps them).
  virtual NamedTensors named_parameters() = 0;
  virtual NamedTensors named_buffers() = 0;
  virtual at::Tensor forward(const at::Tensor& input) = 0;
  virtual void train(bool on) = 0;
  virtual void to(c10::Device device) = 0;
  // Writes the trained module as a TorchScript file torch.jit.load reads; false when the model cannot.
  virtual bool write_torchscript(const std::string& /*path*/) { return false; }
};

// A torch::nn::Module whose forward takes one tensor and returns one (AnyModule's requirement).
std::unique_ptr<Model> module_model(torch::nn::AnyModule module);

struct Batch {
  at::Tensor inputs;
  at::Tensor targets;
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  // The samples at `indices` (int64, on the CPU), stacked along a new first dimension, on the CPU.
  virtual Batch get_batch(const at::Tensor& indices) const = 0;
  // Where the samples come from, for messages: "data.pt" or "the seed's MyTrainDataset".
  virtual std::string name() const = 0;
  // Called before training when the loss takes class indices: throws ddp::Error naming the file when a
  // label lies outside [0, classes). The trainer checks the first batch itself; a data set that can check
  // every label cheaply does so here.
  virtual void check_class_labels(int64_t /*classes*/) const {}
};

// Samples held in memory: inputs[i] and targets[i] (torch.utils.data.TensorDataset).
class TensorDataset : public Dataset {
 public:
  TensorDataset(at::Tensor inputs, at::Tensor targets, std::string name);
  int64_t size() const override { return inputs_.size(0); }
  Batch get_batch(const at::Tensor& indices) const override;
  std::string name() const override { return name_; }

 private:
  at::Tensor inputs_;
  at::Tensor targets_;
  std::string name_;
};

struct TrainingJob {
  std::unique_ptr<Model> model;
  std::unique_ptr<Dataset> data;
  LossKind loss = LossKind::MeanSquaredError;
  // How to name the model in messages, e.g. "--model net.pt" or "--workload mlp --width 1024".
  std::string model_name = "the model";
};

// The loss PyTorch computes for it: F.mse_loss, F.cross_entropy or F.nll_loss, mean over the batch. Class
// indices of any integer type are taken as int64; floating-point targets are taken in the output's type.
at::Tensor compute_loss(LossKind loss, const at::Tensor& output, const at::Tensor& target);

}  // namespace ddp::runtime
