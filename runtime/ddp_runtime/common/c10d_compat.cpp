#include "ddp_runtime/common/c10d_compat.hpp"

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickler.h>
#include <torch/optim/optimizer.h>
#include <torch/version.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/csrc/distributed/c10d/reducer.hpp>

#include <algorithm>
#include <initializer_list>
#include <sstream>
#include <type_traits>
#include <unordered_map>
#include <vector>

#ifdef DDP_WITH_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include "core/error.hpp"

namespace ddp::runtime::compat {
namespace {

// 1.13: the Gloo, NCCL and MPI groups are ProcessGroups. 2.x: they are Backends that a ProcessGroup dispatches to,
// by the device type of the tensors.
template <class Backend>
ProcessGroupPtr as_process_group([[maybe_unused]] const StorePtr& store, [[maybe_unused]] int rank,
                                 [[maybe_unused]] int size, c10::intrusive_ptr<Backend> backend,
                                 [[maybe_unused]] std::initializer_list<c10::DeviceType> devices) {
#if !DDP_TORCH_AT_LEAST(2, 0)
  return backend;
#else
  using Group = c10d::ProcessGroup;
  const std::string name = backend->getBackendName();
  const auto type = name == "nccl"  ? Group::BackendType::NCCL
                    : name == "mpi" ? Group::BackendType::MPI
                                    : Group::BackendType::GLOO;
#if DDP_TORCH_AT_LEAST(2, 6)
  auto group = c10::make_intrusive<Group>(store, rank, size);
#else
  auto group = c10::make_intrusive<Group>(store, rank, size, c10::make_intrusive<Group::Options>(name));
#endif
  for (const c10::DeviceType device : devices) group->setBackend(device, type, backend);
  group->setDefaultBackend(type);
  return group;
#endif
}

std::shared_ptr<gloo::transport::Device> gloo_device(const std::vector<std::string>& interfaces, std::size_t i) {
  return interfaces.empty() ? c10d::ProcessGroupGloo::createDefaultDevice()
                            : c10d::ProcessGroupGloo::createDeviceForInterface(interfaces[i]);
}

// The optimizers key their per-parameter state by the parameter's TensorImpl: 1.13 spells the key as the
// pointer printed to a string, 2.x uses the pointer itself.
template <class StateMap>
typename StateMap::key_type state_key(const at::Tensor& param) {
  using Key = typename StateMap::key_type;
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream key;
    key << static_cast<const void*>(param.unsafeGetTensorImpl());
    return key.str();
  } else {
    return param.unsafeGetTensorImpl();
  }
}

template <class Optimizer>
auto state_key_of(Optimizer& optimizer, const at::Tensor& param) {
  return state_key<std::remove_reference_t<decltype(optimizer.state())>>(param);
}

}  // namespace

StorePtr make_tcp_store(const std::string& host, c10d::TCPStoreOptions options) {
#if DDP_TORCH_AT_LEAST(2, 4)
  if (options.useLibUV) {
    try {
      return c10::make_intrusive<c10d::TCPStore>(host, options);
    } catch (const c10::Error& e) {
      // The only way to ask LibTorch whether it has libuv (c10d::detail's query is not exported).
      if (std::string(e.what()).find("without libuv support") == std::string::npos) throw;
    }
    options.useLibUV = false;
  }
#endif
  return c10::make_intrusive<c10d::TCPStore>(host, options);
}

ProcessGroupPtr make_gloo_group(const StorePtr& store, int rank, int size, const std::vector<std::string>& interfaces,
                                std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  for (std::size_t i = 0; i < std::max<std::size_t>(interfaces.size(), 1); ++i) {
    options->devices.push_back(gloo_device(interfaces, i));
  }
  auto gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, options);
  return as_process_group(store, rank, size, gloo, {c10::DeviceType::CPU});
}

ProcessGroupPtr as_host_process_group(const c10::intrusive_ptr<GroupImplementation>& group) {
  return as_process_group(c10::make_intrusive<c10d::HashStore>(), group->getRank(), group->getSize(), group,
                          {c10::DeviceType::CPU, c10::DeviceType::CUDA});
}

bool nccl_built() {
#ifdef DDP_WITH_NCCL
  return true;
#else
  return false;
#endif
}

void require_nccl() {
  if (!nccl_built()) {
    throw Error(
        "the NCCL backend is not built: this LibTorch has no CUDA, or nccl.h was not found when it was configured; "
        "use DDP_BACKEND=gloo, or rebuild against a CUDA LibTorch (cmake -DTorch_DIR=<libtorch>/share/cmake/Torch, "
        "NCCL_HOME=<nccl>)");
  }
}

ProcessGroupPtr make_nccl_group([[maybe_unused]] const StorePtr& store, [[maybe_unused]] int rank,
                                [[maybe_unused]] int size, [[maybe_unused]] std::chrono::milliseconds timeout) {
#ifdef DDP_WITH_NCCL
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  auto nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, options);
  return as_process_group(store, rank, size, nccl, {c10::DeviceType::CUDA});
#else
  require_nccl();
  return {};
#endif
}

namespace {

// The Reducer's constructor by its arguments, not by version number: up to 2.x it takes the per-bucket size limits
// after the bucket indices; later releases (2.14 has it) drop them and add, after first_bucket_bytes_cap, whether
// to skip all-reducing unused parameters, whether the Python reducer runs, and the limits used when buckets are
// rebuilt (empty: the Reducer's own rule from bucket_bytes_cap and first_bucket_bytes_cap, which is what the
// limits passed to the older constructor say too: one bucket until the rebuild).
using LimitsFirst = std::is_constructible<c10d::Reducer, std::vector<at::Tensor>, std::vector<std::vector<size_t>>,
                                          std::vector<size_t>, ProcessGroupPtr, std::vector<bool>, int64_t, bool, bool,
                                          std::unordered_map<size_t, std::string>, int64_t>;

template <class Reducer = c10d::Reducer>
std::shared_ptr<Reducer> construct_reducer(const std::vector<at::Tensor>& params, ReducerConfig config,
                                           const ProcessGroupPtr& group) {
  std::vector<bool> expect_sparse(params.size(), false);
  const bool find_unused_parameters = false;
  if constexpr (LimitsFirst::value) {
    return std::make_shared<Reducer>(params, std::move(config.bucket_indices), std::move(config.bucket_size_limits),
                                     group, std::move(expect_sparse), config.bucket_bytes_cap, find_unused_parameters,
                                     config.gradient_as_bucket_view, std::move(config.param_names),
                                     config.first_bucket_bytes_cap);
  } else {
    return std::make_shared<Reducer>(params, std::move(config.bucket_indices), group, std::move(expect_sparse),
                                     config.bucket_bytes_cap, find_unused_parameters, config.gradient_as_bucket_view,
                                     std::move(config.param_names), config.first_bucket_bytes_cap,
                                     /*skip_all_reduce_unused_params=*/false, /*use_python_reducer=*/false,
                                     /*bucket_bytes_cap_list=*/std::vector<int64_t>{});
  }
}

}  // namespace

std::shared_ptr<c10d::Reducer> make_reducer(const std::vector<at::Tensor>& params, ReducerConfig config,
                                            const ProcessGroupPtr& group) {
  return construct_reducer(params, std::move(config), group);
}

torch::optim::OptimizerParamState* optimizer_param_state(torch::optim::Optimizer& optimizer, const at::Tensor& param) {
  auto& state = optimizer.state();
  const auto found = state.find(state_key_of(optimizer, param));
  return found == state.end() ? nullptr : found->second.get();
}

void set_optimizer_param_state(torch::optim::Optimizer& optimizer, const at::Tensor& param,
                               std::unique_ptr<torch::optim::OptimizerParamState> state) {
  optimizer.state()[state_key_of(optimizer, param)] = std::move(state);
}

void write_pickle_archive(const c10::IValue& value, const ByteSink& sink) {
  std::vector<char> pickle;
  torch::jit::Pickler pickler(
      [&](const char* data, std::size_t size) { pickle.insert(pickle.end(), data, data + size); }, nullptr, nullptr,
      nullptr, nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(value);
  pickler.stop();
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, std::size_t size) {
    sink(data, size);
    return size;
  });
  torch::jit::writeArchiveAndTensors("data", pickle.data(), pickle.size(), pickler.tensorData(), writer);
  writer.writeEndOfFile();
}

}  // namespace ddp::runtime::compat
