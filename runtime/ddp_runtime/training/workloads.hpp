#pragma once
// ddp-train's workloads: the seed's MyTrainDataset with Linear(20, 1), an MLP of configurable width on the
// same data, PyTorch's quickstart network on FashionMNIST, and a TorchScript module (--model) on data files
// (--data). Module and parameter names match the Python originals, so that state dicts move between the two
// in both directions. Also the losses (compute_loss: job.hpp), one table entry each. make_workload, the job factory
// that builds them, is declared in train.hpp: ddp-train's main uses the installed API only.
#include <ATen/core/Tensor.h>

#include "ddp_runtime/job.hpp"

namespace ddp::runtime {

// Before the first step: throws ddp::Error naming the model, the data set, both shapes and the losses that would
// fit, when `job.loss` cannot take `output` and `targets` (the first batch's); checks class indices against the
// classes the model outputs.
void check_loss_fits(const TrainingJob& job, const at::Tensor& output, const at::Tensor& targets);

}  // namespace ddp::runtime
