#pragma once
// ddp-train's workloads: the seed's MyTrainDataset with Linear(20, 1), an MLP of configurable width on the
// same data, PyTorch's quickstart network on FashionMNIST, and a TorchScript module (--model) on data files
// (--data). Module and parameter names match the Python originals, so that state dicts move between the two
// in both directions. Also the losses (compute_loss: job.hpp), one table entry each.
#include <ATen/core/Tensor.h>

#include "ddp_runtime/job.hpp"

namespace ddp::runtime {

// The trainer calls torch.manual_seed(options.seed) first; the data and the model are then built in the order
// the seed script builds them, so that a Python script doing the same gets the same samples and initial weights.
TrainingJob make_workload(const TrainOptions& options);

// Before the first step: throws ddp::Error naming the model, the data set, both shapes and the losses that would
// fit, when `job.loss` cannot take `output` and `targets` (the first batch's); checks class indices against the
// classes the model outputs.
void check_loss_fits(const TrainingJob& job, const at::Tensor& output, const at::Tensor& targets);

}  // namespace ddp::runtime
