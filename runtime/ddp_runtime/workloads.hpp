#pragma once
// ddp-train's example workloads: the seed's MyTrainDataset with Linear(20, 1), an MLP of configurable width on
// the same data, and PyTorch's quickstart network on FashionMNIST. Module and parameter names match the Python
// originals, so that state dicts move between the two in both directions.
#include <torch/nn/modules/container/any.h>

#include <cstdint>
#include <string>

#include "ddp_runtime/cli.hpp"

namespace ddp::runtime {

enum class LossKind { MeanSquaredError, CrossEntropy };

struct Dataset {
  at::Tensor inputs;   // [N, ...] float
  at::Tensor targets;  // [N, 1] float for regression, [N] int64 class labels for classification
  int64_t size() const { return inputs.size(0); }
};

struct Workload {
  Dataset data;
  torch::nn::AnyModule model;  // forward(Tensor) -> Tensor; model.ptr() for parameters and state
  LossKind loss = LossKind::MeanSquaredError;
};

// Calls torch.manual_seed(options.seed) first, then builds the data and the model in the order the seed script
// does: a Python script doing the same gets the same samples and the same initial weights.
Workload make_workload(const TrainOptions& options);

// datautils.MyTrainDataset(size): size pairs of (torch.rand(20), torch.rand(1)), drawn in that order.
Dataset my_train_dataset(int64_t size);
// train-images-idx3-ubyte and train-labels-idx1-ubyte from dir or from dir/FashionMNIST/raw (torchvision's
// layout); pixels scaled to [0, 1] as ToTensor does.
Dataset fashion_mnist(const std::string& dir);

at::Tensor compute_loss(LossKind loss, const at::Tensor& output, const at::Tensor& target);

}  // namespace ddp::runtime
