#include "ddp_runtime/process_group.hpp"

#include <ATen/ops/from_blob.h>
#include <torch/cuda.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <sys/socket.h>

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <thread>
#include <utility>

#include "core/child_process.hpp"
#include "core/error.hpp"
#include "core/netif.hpp"
#include "core/socket.hpp"
#include "ddp_runtime/distributed/mpi_bootstrap.hpp"
#include "ddp_runtime/distributed/mpi_process_group.hpp"
#include "ddp_runtime/distributed/store_auth.hpp"
#include "ddp_runtime/training/error_message.hpp"

namespace ddp::runtime {
namespace {

// How long the other ranks wait for rank 0's store to prove itself (store_auth.hpp) once something listens.
constexpr auto kProofWait = std::chrono::seconds(30);

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

// Waits until something accepts connections at MASTER_ADDR:MASTER_PORT (rank 0 may start later), without a word
// to it: what listens there has yet to prove it is rank 0's store.
void wait_for_listener(const Launch& launch, std::chrono::milliseconds timeout) {
  try {
    resolve(launch.master_addr, launch.master_port, SOCK_STREAM, 0);
  } catch (const NetError& e) {
    throw unreachable(launch, timeout, std::string("cannot resolve it: ") + e.what());
  }
  const Deadline deadline = Deadline::after(timeout);
  for (;;) {
    try {
      // At most a second an attempt: a connection whose SYN was lost is tried again rather than waited out.
      const auto attempt = std::chrono::milliseconds(std::min(1000, deadline.poll_ms()));
      Socket::connect_to(launch.master_addr, launch.master_port, Deadline::after(attempt));
      return;
    } catch (const NetError& e) {
      if (deadline.expired()) throw unreachable(launch, timeout, e.what());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

// The store of the job's keys: rank 0 hosts it and publishes its proof; the others use it once it has proven
// itself. Either way the store returned holds every key under the job's secret prefix (store_auth.hpp).
compat::StorePtr make_store(Launch& launch, std::chrono::milliseconds timeout) {
  if (launch.world_size == 1) return c10::make_intrusive<c10d::HashStore>();
  const std::string where = launch.master_addr + ":" + std::to_string(launch.master_port);
  if (launch.rank == 0) {
    c10d::TCPStoreOptions options;
    options.port = static_cast<std::uint16_t>(launch.master_port);
    options.isServer = true;
    options.numWorkers = static_cast<std::size_t>(launch.world_size);
    options.waitWorkers = false;  // the ranks meet in the process group's own rendezvous, after the proof
    options.timeout = timeout;
    compat::StorePtr store;
    try {
      store = compat::make_tcp_store(launch.master_addr, options);
    } catch (const std::exception& e) {
      throw std::runtime_error("rank 0 could not host the rendezvous store at " + where + ": " + error_summary(e) +
                               port_advice(launch));
    }
    // The port the kernel picked when MASTER_PORT was 0 (OpenMPI launches): the one the others will be told.
    launch.master_port = static_cast<c10d::TCPStore&>(*store).getPort();
    return publish_proof(store, launch);
  }
  wait_for_listener(launch, timeout);
  const auto proof_wait = std::min<std::chrono::milliseconds>(timeout, kProofWait);
  ProvenStore proven = connect_verified(launch, proof_wait, timeout);
  if (!proven.store) {
    throw std::runtime_error("rank " + std::to_string(launch.rank) + ": the rendezvous store at " + where +
                             " did not prove within " + seconds_text(proof_wait) + " that it is this job's rank 0" +
                             (launch.job_key.empty() ? "" : " (DDP_JOB_KEY)") + ": " + proven.failure +
                             port_advice(launch) + ", or rank 0 failed first");
  }
  return proven.store;
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

// Gloo and NCCL meet through a TCPStore; MPI has its launcher's rendezvous (mpirun, PMIx under srun).
// `store`: set to the rendezvous store.
compat::ProcessGroupPtr make_group(Launch& launch, const std::string& backend, std::chrono::milliseconds timeout,
                                   compat::StorePtr& store) {
  if (backend == "mpi") return make_mpi_group(launch, timeout);
  if (launch.source == LaunchSource::OpenMpi && launch.master_addr.empty()) {
    // Rank 0 hosts the store first, on MASTER_PORT or a port the kernel picks, and only then tells the others over
    // MPI where it is: no other process can take the port in between.
    if (launch.rank == 0) {
      launch.master_addr = advertised_address(launch.socket_ifnames);
      store = make_store(launch, timeout);  // sets master_port to the port bound
    }
    share_master_over_mpi(launch);
  }
  if (!store) store = make_store(launch, timeout);
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
