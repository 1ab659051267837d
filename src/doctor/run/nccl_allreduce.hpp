#pragma once
// All-reduce over NCCL on the GPUs, what PyTorch's nccl backend does. Built only where CUDA and NCCL were found
// at configure time; the CUDA runtime and NCCL are loaded at run time, so that the same binary runs (and skips
// this test) on nodes without them.
#include <memory>

#include "doctor/run/allreduce.hpp"

namespace ddp::doctor {

std::unique_ptr<AllreduceBackend> make_nccl_backend();

}  // namespace ddp::doctor
