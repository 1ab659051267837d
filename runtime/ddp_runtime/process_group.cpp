#include "ddp_runtime/process_group.hpp"

#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/cuda.h>

#include <stdexcept>

#include "ddp_runtime/error_message.hpp"
#include "ddp_runtime/mpi_bootstrap.hpp"
#include "ddp_runtime/mpi_process_group.hpp"
#include "error.hpp"

namespace ddp::runtime {
namespace {

std::string seconds(std::chrono::milliseconds timeout) {
  const double s = static_cast<double>(timeout.count()) / 1000.0;
  std::string text = std::to_string(s);
  text.erase(text.find_last_not_of('0') + 1);
  if (text.back() == '.') text.pop_back();
  return text + " s";
}

compat::StorePtr make_store(const Launch& launch, std::chrono::milliseconds timeout) {
  if (launch.world_size == 1) return c10::make_intrusive<c10d::HashStore>();
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(launch.master_port);
  options.isServer = launch.rank == 0;
  options.numWorkers = static_cast<std::size_t>(launch.world_size);
  options.waitWorkers = true;
  options.timeout = timeout;
  try {
    return compat::make_tcp_store(launch.master_addr, options);
  } catch (const std::exception& e) {
    const std::string role = launch.rank == 0 ? "could not host" : "could not reach";
    throw std::runtime_error("rank " + std::to_string(launch.rank) + " " + role + " the rendezvous store at " +
                             launch.master_addr + ":" + std::to_string(launch.master_port) + " within " +
                             seconds(timeout) + " (MASTER_ADDR, MASTER_PORT, --timeout): " + error_summary(e) +
                             "; check that every rank was started, that rank 0's host and port are reachable, "
                             "or raise --timeout");
  }
}

std::string choose_backend(BackendHint hint) {
  switch (hint) {
    case BackendHint::Gloo: return "gloo";
    case BackendHint::Nccl:
      compat::require_nccl();
      if (!torch::cuda::is_available()) throw Error("backend nccl needs a GPU, and no CUDA device is visible; use DDP_BACKEND=gloo");
      return "nccl";
    case BackendHint::Mpi: return "mpi";
    case BackendHint::Auto: break;
  }
  return compat::nccl_built() && torch::cuda::is_available() ? "nccl" : "gloo";
}

// Gloo and NCCL meet through a TCPStore; MPI has its launcher's rendezvous (mpirun, PMIx under srun).
compat::ProcessGroupPtr make_group(Launch& launch, const std::string& backend, std::chrono::milliseconds timeout) {
  if (backend == "mpi") return make_mpi_group(launch.rank, launch.world_size, timeout);
  if (launch.source == LaunchSource::OpenMpi && launch.master_addr.empty()) share_master_over_mpi(launch);
  const compat::StorePtr store = make_store(launch, timeout);
  if (backend == "nccl") return compat::make_nccl_group(store, launch.rank, launch.world_size, timeout);
  try {
    return compat::make_gloo_group(store, launch.rank, launch.world_size, launch.socket_ifnames, timeout);
  } catch (const std::exception& e) {
    std::string interfaces;
    for (const std::string& name : launch.socket_ifnames) interfaces += (interfaces.empty() ? "" : ",") + name;
    throw std::runtime_error("rank " + std::to_string(launch.rank) + " could not connect Gloo to its peers (" +
                             (interfaces.empty() ? "GLOO_SOCKET_IFNAME unset" : "GLOO_SOCKET_IFNAME=" + interfaces) +
                             ", timeout " + seconds(timeout) + "): " + error_summary(e));
  }
}

c10::Device device_for(const std::string& backend, int local_rank) {
  if (backend != "nccl") return c10::Device(c10::kCPU);
  const auto count = static_cast<int>(torch::cuda::device_count());
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(local_rank % count));
}

}  // namespace

Distributed init_distributed(Launch launch, BackendHint hint, std::chrono::milliseconds timeout) {
  const std::string backend = choose_backend(hint);
  Distributed dist;
  dist.group = make_group(launch, backend, timeout);
  dist.rank = launch.rank;
  dist.world_size = launch.world_size;
  dist.local_rank = launch.local_rank;
  dist.backend = backend;
  dist.device = device_for(backend, launch.local_rank);
  return dist;
}

namespace {

// NCCL reduces device tensors only; for Gloo the copies to and from the device are no-ops.
void collective_on_device(const Distributed& dist, at::Tensor& tensor, bool broadcast, int root = 0) {
  std::vector<at::Tensor> tensors{tensor.to(dist.device)};
  c10d::BroadcastOptions options;
  options.rootRank = root;
  auto work = broadcast ? dist.group->broadcast(tensors, options) : dist.group->allreduce(tensors);
  work->wait();
  if (!tensors[0].is_same(tensor)) tensor.copy_(tensors[0]);
}

}  // namespace

std::string broadcast_string(const Distributed& dist, const std::string& text, int root) {
  at::Tensor length = at::tensor({static_cast<int64_t>(text.size())}, at::kLong);
  collective_on_device(dist, length, true, root);
  at::Tensor bytes = at::zeros({length.item<int64_t>()}, at::kByte);
  if (dist.rank == root) std::copy(text.begin(), text.end(), bytes.data_ptr<uint8_t>());
  collective_on_device(dist, bytes, true, root);
  const auto* data = reinterpret_cast<const char*>(bytes.data_ptr<uint8_t>());
  return std::string(data, data + bytes.numel());
}

void all_reduce_sum(const Distributed& dist, at::Tensor& tensor) { collective_on_device(dist, tensor, false); }

}  // namespace ddp::runtime
