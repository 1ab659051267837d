#include "ddp_runtime/distributed/process_group.hpp"

#include <ATen/ops/from_blob.h>
#include <torch/cuda.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <sys/socket.h>

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <thread>
#include <utility>

#include "base/child_process.hpp"
#include "base/socket.hpp"
#include "core/error.hpp"
#include "core/netif.hpp"
#include "ddp_runtime/common/error_message.hpp"
#include "ddp_runtime/distributed/mpi_bootstrap.hpp"
#include "ddp_runtime/distributed/mpi_process_group.hpp"
#include "ddp_runtime/distributed/project_store.hpp"
#include "ddp_runtime/distributed/store_auth.hpp"
#include "store/store.hpp"

namespace ddp::runtime {
namespace {

std::string port_advice(const Launch& launch) {
  return "; choose another port (srun --ddp-port=N, or MASTER_PORT), or ask your admin to reserve ports for steps "
         "(MpiParams=ports in slurm.conf); port " +
         std::to_string(launch.master_port) + " on " + launch.master_addr + " is held by another program";
}

std::runtime_error unreachable(const Launch& launch, std::chrono::milliseconds timeout, const std::string& why) {
  return std::runtime_error("rank " + std::to_string(launch.rank) + " could not reach the rendezvous store at " +
                            launch.master_addr + ":" + std::to_string(launch.master_port) + " within " +
                            seconds_text(timeout) + " (MASTER_ADDR, MASTER_PORT, --timeout): " + why +
                            "; check that every rank was started, that rank 0's host and port are reachable, "
                            "or raise --timeout");
}

// The store of the job's keys, the project's (project_store.hpp): rank 0 hosts it on MASTER_PORT; every rank, rank 0
// included, is a client that proves the job's key to it and has it prove the key back. Its keys lie under the job's
// secret prefix too (store_auth.hpp), so that a name never says what it is.
struct RendezvousStore {
  compat::StorePtr store;
  int master_port = 0;  // where it listens: MASTER_PORT, or the port the kernel picked when MASTER_PORT was 0
};

RendezvousStore make_store(const Launch& launch, std::chrono::milliseconds timeout) {
  if (launch.world_size == 1) return {c10::make_intrusive<c10d::HashStore>(), launch.master_port};
  const std::string where = launch.master_addr + ":" + std::to_string(launch.master_port);
  if (launch.rank == 0) {
    uint16_t bound = 0;
    compat::StorePtr store;
    try {
      // Every rank, and each again for its peer check.
      const size_t clients = std::max<size_t>(kMaxClients, 2 * static_cast<size_t>(launch.world_size) + 64);
      store = host_project_store(launch, rendezvous_run(launch), "", static_cast<uint16_t>(launch.master_port), timeout,
                                 bound, clients);
    } catch (const std::exception& e) {
      throw std::runtime_error("rank 0 could not host the rendezvous store at " + where + ": " + error_summary(e) +
                               port_advice(launch));
    }
    return {under_key_prefix(launch, store), bound};
  }
  try {
    resolve(launch.master_addr, launch.master_port, SOCK_STREAM, 0);
  } catch (const NetError& e) {
    throw unreachable(launch, timeout, std::string("cannot resolve it: ") + e.what());
  }
  try {
    return {
        under_key_prefix(launch, connect_project_store(launch, rendezvous_run(launch), launch.master_addr,
                                                       static_cast<uint16_t>(launch.master_port), timeout, timeout)),
        launch.master_port};
  } catch (const ExchangeError& e) {
    const std::string why = e.what();
    if (why.find("cannot reach") != std::string::npos) throw unreachable(launch, timeout, why);
    throw std::runtime_error("rank " + std::to_string(launch.rank) + ": the rendezvous store at " + where +
                             " is not this job's rank 0's: " + why + port_advice(launch) + ", or rank 0 failed first");
  }
}

// 0 without CUDA, so that a LibTorch built with CUDA on a machine without a GPU counts as having none.
int cuda_devices() { return torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0; }

std::string choose_backend(Backend hint) {
  switch (hint) {
    case Backend::Gloo: return "gloo";
    case Backend::Nccl:
      compat::require_nccl();
      // Before any rendezvous: without a GPU every rank refuses at once, with the same line.
      device_for("nccl", 0, cuda_devices());
      return "nccl";
    case Backend::Mpi: return "mpi";
    case Backend::Auto: break;
  }
  return compat::nccl_built() && cuda_devices() > 0 ? "nccl" : "gloo";
}

// Gloo and NCCL meet through rank 0's store; MPI has its launcher's rendezvous (mpirun, PMIx under srun).
// `store`: set to the rendezvous store.
compat::ProcessGroupPtr make_group(Launch& launch, const std::string& backend, std::chrono::milliseconds timeout,
                                   compat::StorePtr& store) {
  if (backend == "mpi") return make_mpi_group(launch, timeout);
  if (launch.source == LaunchSource::OpenMpi && launch.master_addr.empty()) {
    // Rank 0 hosts the store first, on MASTER_PORT or a port the kernel picks, and only then tells the others over
    // MPI where it is: no other process can take the port in between.
    if (launch.rank == 0) {
      launch.master_addr = advertised_address(launch.socket_ifnames);
      RendezvousStore hosted = make_store(launch, timeout);
      store = std::move(hosted.store);
      launch.master_port = hosted.master_port;  // the port the others will be told
    }
    share_master_over_mpi(launch);
  }
  if (!store) store = make_store(launch, timeout).store;
  if (backend == "nccl") return compat::make_nccl_group(store, launch.rank, launch.world_size, timeout);
  try {
    return compat::make_gloo_group(store, launch.rank, launch.world_size, launch.socket_ifnames, timeout);
  } catch (const std::exception& e) {
    std::string interfaces;
    for (const std::string& name : launch.socket_ifnames) interfaces += (interfaces.empty() ? "" : ",") + name;
    throw std::runtime_error("rank " + std::to_string(launch.rank) + " could not connect Gloo to its peers (" +
                             (interfaces.empty() ? "GLOO_SOCKET_IFNAME unset" : "GLOO_SOCKET_IFNAME=" + interfaces) +
                             ", timeout " + seconds_text(timeout) + "): " + error_summary(e));
  }
}

}  // namespace

c10::Device device_for(const std::string& backend, int local_rank, int visible_gpus) {
  if (backend != "nccl") return c10::Device(c10::kCPU);
  if (visible_gpus <= 0) {
    throw Error("backend nccl needs a GPU, and no CUDA device is visible; use --backend gloo (DDP_BACKEND=gloo)");
  }
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(local_rank % visible_gpus));
}

Distributed init_distributed(Launch launch, Backend hint, std::chrono::milliseconds timeout) {
  const std::string backend = choose_backend(hint);
  Distributed dist;
  dist.group = make_group(launch, backend, timeout, dist.store);
  dist.rank = launch.rank;
  dist.world_size = launch.world_size;
  dist.local_rank = launch.local_rank;
  dist.backend = backend;
  dist.device = device_for(backend, launch.local_rank, backend == "nccl" ? cuda_devices() : 0);
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

ByteView broadcast_bytes(const Distributed& dist, const ByteView& bytes, int root) {
  constexpr int64_t kPiece = int64_t{64} << 20;
  at::Tensor length = at::tensor({static_cast<int64_t>(bytes.size)}, at::kLong);
  collective_on_device(dist, length, true, root);
  const int64_t size = length.item<int64_t>();
  std::vector<char> received(dist.rank == root ? 0 : static_cast<std::size_t>(size));
  // The root's bytes are only read: a broadcast sends from the root's tensor.
  char* data = dist.rank == root ? const_cast<char*>(bytes.data) : received.data();
  for (int64_t offset = 0; offset < size; offset += kPiece) {
    at::Tensor piece = at::from_blob(data + offset, {std::min(kPiece, size - offset)}, at::kByte);
    collective_on_device(dist, piece, true, root);
  }
  return dist.rank == root ? bytes : bytes_in_memory(std::move(received));
}

void all_reduce_sum(const Distributed& dist, at::Tensor& tensor) { collective_on_device(dist, tensor, false); }

}  // namespace ddp::runtime
