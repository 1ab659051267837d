#pragma once
// The one place for LibTorch calls whose form differs between Debian's 1.13 and 2.x: how a Gloo, NCCL or MPI
// group becomes a c10d::ProcessGroup (2.x wraps backends), the Reducer's constructor, the key of an
// optimizer's per-parameter state, and the streaming writer of torch.save's zip format. The rest of the
// runtime uses only calls that are the same in both. Declarations only: the heavy c10d and JIT headers stay
// in c10d_compat.cpp.
#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <c10/util/intrusive_ptr.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <torch/version.h>

// LibTorch releases this runtime is built and tested against: Debian's 1.13 and 2.x (CMake refuses others).
#define DDP_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace c10d {
class Backend;
struct TCPStoreOptions;
class ProcessGroup;
class Reducer;
class Store;
}  // namespace c10d

namespace torch::optim {
class Optimizer;
class OptimizerParamState;
}  // namespace torch::optim

namespace ddp::runtime::compat {

using ProcessGroupPtr = c10::intrusive_ptr<c10d::ProcessGroup>;
using StorePtr = c10::intrusive_ptr<c10d::Store>;

// A TCPStore at host. LibTorch 2.4 and later ask for the libuv server by default; a LibTorch built without libuv
// (Debian's) refuses that, and the store is then made with the classic server.
StorePtr make_tcp_store(const std::string& host, c10d::TCPStoreOptions options);

// Gloo over the named interfaces (GLOO_SOCKET_IFNAME), or over the address this host's name resolves to.
ProcessGroupPtr make_gloo_group(const StorePtr& store, int rank, int size, const std::vector<std::string>& interfaces,
                                std::chrono::milliseconds timeout);

// The base class of a group implemented in this runtime (the MPI group): in 1.13 a ProcessGroup itself, in 2.x a
// Backend, which as_host_process_group wraps into a ProcessGroup. Complete after including ProcessGroup.hpp.
#if !DDP_TORCH_AT_LEAST(2, 0)
using GroupImplementation = c10d::ProcessGroup;
#else
using GroupImplementation = c10d::Backend;
#endif
// 2.x dispatches each call by the device of its tensors: the group serves CPU tensors, and CUDA tensors reach it too,
// so that it refuses them with its own message instead of c10d's "no backend for device".
ProcessGroupPtr as_host_process_group(const c10::intrusive_ptr<GroupImplementation>& group);

// True where LibTorch has CUDA and nccl.h was found at configure time; require_nccl throws ddp::Error otherwise.
bool nccl_built();
void require_nccl();
ProcessGroupPtr make_nccl_group(const StorePtr& store, int rank, int size, std::chrono::milliseconds timeout);

struct ReducerConfig {
  std::vector<std::vector<std::size_t>> bucket_indices;
  std::vector<std::size_t> bucket_size_limits;
  int64_t bucket_bytes_cap = 0;
  int64_t first_bucket_bytes_cap = 0;
  bool gradient_as_bucket_view = false;
  std::unordered_map<std::size_t, std::string> param_names;
};
std::shared_ptr<c10d::Reducer> make_reducer(const std::vector<at::Tensor>& params, ReducerConfig config,
                                            const ProcessGroupPtr& group);

// An optimizer's state of one parameter (SGDParamState, AdamWParamState, ...): nullptr before its first step.
torch::optim::OptimizerParamState* optimizer_param_state(torch::optim::Optimizer& optimizer, const at::Tensor& param);
void set_optimizer_param_state(torch::optim::Optimizer& optimizer, const at::Tensor& param,
                               std::unique_ptr<torch::optim::OptimizerParamState> state);

// Writes `value` in torch.save's zip format, streaming: tensors go from their storage to `sink` without a copy
// of the whole file in memory. Dicts and lists are written untagged, as Python's pickle writes them: PyTorch
// >= 2.6 loads with weights_only=True by default and refuses LibTorch's type tags (restore_type_tag,
// build_intlist). `value` must hold no specialised list (c10::List<int64_t> and the like; use GenericList).
using ByteSink = std::function<void(const void* data, std::size_t size)>;
void write_pickle_archive(const c10::IValue& value, const ByteSink& sink);

}  // namespace ddp::runtime::compat
