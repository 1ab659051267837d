#pragma once
// The process group factory: the one place that turns a Launch and a backend hint into a c10d group
// (NCCL on GPUs where LibTorch has CUDA, Gloo on CPUs, MPI where asked for), plus the few small collectives
// the trainer needs outside of gradient synchronisation.
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <chrono>
#include <string>

#include "core/launch.hpp"
#include "ddp_runtime/common/c10d_compat.hpp"
#include "ddp_runtime/common/mapped_file.hpp"

namespace ddp::runtime {

struct Distributed {
  compat::ProcessGroupPtr group;
  // The rendezvous store (Gloo and NCCL; null for MPI), under the job's key prefix; rank 0 hosts it.
  compat::StorePtr store;
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string backend;  // "gloo", "nccl" or "mpi"
  c10::Device device = c10::Device(c10::kCPU);
};

// Gloo and NCCL: rendezvous through a TCPStore at MASTER_ADDR:MASTER_PORT hosted by rank 0 (an in-process store for
// a single process); a rank that cannot reach it within `timeout` throws an error naming the address, port and
// timeout. MPI: the launcher's rendezvous; MPI's rank and size must equal the Launch's.
Distributed init_distributed(Launch launch, Backend hint, std::chrono::milliseconds timeout);

// The device a rank trains on: for NCCL the GPU of its LOCAL_RANK among the `visible_gpus` it sees, modulo their
// number (srun --gpus-per-task shows each task its one GPU, as 0); the CPU for Gloo and MPI. NCCL with no visible
// GPU throws ddp::Error naming the fix.
c10::Device device_for(const std::string& backend, int local_rank, int visible_gpus);

// The text of rank `root` on every rank.
std::string broadcast_string(const Distributed& dist, const std::string& text, int root = 0);

// The bytes of rank `root` on every rank (`bytes` is read on the root only), sent in pieces of at most 64 MiB so
// that a large file needs no tensor of its size on a GPU.
ByteView broadcast_bytes(const Distributed& dist, const ByteView& bytes, int root = 0);

// Sums a small CPU tensor over all ranks, in place.
void all_reduce_sum(const Distributed& dist, at::Tensor& tensor);

}  // namespace ddp::runtime
