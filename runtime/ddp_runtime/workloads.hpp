#pragma once
// ddp-train's workloads: the seed's MyTrainDataset with Linear(20, 1), an MLP of configurable width on the
// same data, PyTorch's quickstart network on FashionMNIST, and a TorchScript module (--model) on data files
// (--data). Module and parameter names match the Python originals, so that state dicts move between the two
// in both directions.
#include "ddp_runtime/job.hpp"

namespace ddp::runtime {

// The trainer calls torch.manual_seed(options.seed) first; the data and the model are then built in the order
// the seed script builds them, so that a Python script doing the same gets the same samples and initial weights.
TrainingJob make_workload(const TrainOptions& options);

}  // namespace ddp::runtime
