#include "doctor/run/nccl_allreduce.hpp"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "base/shared_library.hpp"

namespace ddp::doctor {
namespace {

// The entry points used here, resolved with dlsym; the headers give their exact types.
struct Api {
  decltype(&cudaGetDeviceCount) get_device_count;
  decltype(&cudaSetDevice) set_device;
  decltype(&cudaGetErrorString) error_string;
  cudaError_t (*malloc)(void**, size_t);  // cudaMalloc: C++ also sees a template overload
  decltype(&cudaFree) free;
  decltype(&cudaMemcpy) memcpy;
  decltype(&cudaStreamCreate) stream_create;
  decltype(&cudaStreamDestroy) stream_destroy;
  decltype(&cudaStreamQuery) stream_query;
  decltype(&ncclGetUniqueId) get_unique_id;
  decltype(&ncclCommInitRankConfig) init_rank_config;
  decltype(&ncclCommGetAsyncError) async_error;
  decltype(&ncclAllReduce) all_reduce;
  decltype(&ncclCommFinalize) finalize;
  decltype(&ncclCommDestroy) destroy;
  decltype(&ncclCommAbort) abort;
  decltype(&ncclGetErrorString) nccl_error_string;
};

// Loads both libraries once per process, for good (CUDA's threads outlive any unload); `error` says what is missing.
const Api* load_api(std::string& error) {
  static std::string load_error;
  static const Api* api = []() -> const Api* {
    SharedLibrary cudart(DDP_CUDART_LIBRARY);
    SharedLibrary nccl("libnccl.so.2");
    cudart.keep();
    nccl.keep();
    if (!cudart.loaded() || !nccl.loaded()) {
      load_error = std::string("cannot load ") + (cudart.loaded() ? "libnccl.so.2" : DDP_CUDART_LIBRARY);
      return nullptr;
    }
    static Api loaded{};
    const bool complete =
        cudart.bind("cudaGetDeviceCount", loaded.get_device_count) && cudart.bind("cudaSetDevice", loaded.set_device) &&
        cudart.bind("cudaGetErrorString", loaded.error_string) && cudart.bind("cudaMalloc", loaded.malloc) &&
        cudart.bind("cudaFree", loaded.free) && cudart.bind("cudaMemcpy", loaded.memcpy) &&
        cudart.bind("cudaStreamCreate", loaded.stream_create) &&
        cudart.bind("cudaStreamDestroy", loaded.stream_destroy) &&
        cudart.bind("cudaStreamQuery", loaded.stream_query) && nccl.bind("ncclGetUniqueId", loaded.get_unique_id) &&
        nccl.bind("ncclCommInitRankConfig", loaded.init_rank_config) &&
        nccl.bind("ncclCommGetAsyncError", loaded.async_error) && nccl.bind("ncclAllReduce", loaded.all_reduce) &&
        nccl.bind("ncclCommFinalize", loaded.finalize) && nccl.bind("ncclCommDestroy", loaded.destroy) &&
        nccl.bind("ncclCommAbort", loaded.abort) && nccl.bind("ncclGetErrorString", loaded.nccl_error_string);
    if (!complete) {
      load_error = "the CUDA runtime or NCCL lacks an entry point this tool uses (too old)";
      return nullptr;
    }
    return &loaded;
  }();
  error = load_error;
  return api;
}

void check_cuda(const Api& api, cudaError_t rc, const char* call) {
  if (rc != cudaSuccess) throw std::runtime_error(std::string(call) + ": " + api.error_string(rc));
}

// A non-blocking communicator: every call may return ncclInProgress, and then its state is polled against the
// deadline, so that a peer that never comes cannot hang the run.
class Communicator {
 public:
  Communicator(const Api& api, int ranks, const ncclUniqueId& id, int rank, std::chrono::milliseconds timeout)
      : api_(api), timeout_(timeout) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    try {
      finish(api_.init_rank_config(&comm_, ranks, id, rank, &config), "ncclCommInitRankConfig");
    } catch (...) {
      // The destructor does not run for a constructor that throws.
      if (comm_ != nullptr) api_.abort(comm_);
      throw;
    }
  }
  ~Communicator() {
    ncclResult_t state = failed_ ? ncclInternalError : api_.finalize(comm_);
    const Deadline deadline = Deadline::after(timeout_);
    while (state == ncclInProgress && !deadline.expired()) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      api_.async_error(comm_, &state);
    }
    if (state == ncclSuccess) {
      api_.destroy(comm_);
    } else {
      api_.abort(comm_);
    }
  }
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  void finish(ncclResult_t rc, const char* call) {
    const Deadline deadline = Deadline::after(timeout_);
    while (rc == ncclInProgress) {
      if (deadline.expired()) fail(std::string(call) + ": timed out");
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      api_.async_error(comm_, &rc);
    }
    if (rc != ncclSuccess) fail(std::string(call) + ": " + api_.nccl_error_string(rc));
  }

  // Waits for the stream while watching the communicator for asynchronous errors.
  void wait(cudaStream_t stream) {
    const Deadline deadline = Deadline::after(timeout_);
    for (;;) {
      const cudaError_t rc = api_.stream_query(stream);
      if (rc == cudaSuccess) return;
      if (rc != cudaErrorNotReady) fail(std::string("cudaStreamQuery: ") + api_.error_string(rc));
      ncclResult_t state = ncclSuccess;
      api_.async_error(comm_, &state);
      if (state != ncclSuccess && state != ncclInProgress) fail(std::string("NCCL: ") + api_.nccl_error_string(state));
      if (deadline.expired()) fail("an all-reduce did not finish in time");
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

  ncclComm_t get() const { return comm_; }

 private:
  [[noreturn]] void fail(const std::string& why) {
    failed_ = true;
    throw std::runtime_error(why);
  }

  const Api& api_;
  std::chrono::milliseconds timeout_;
  ncclComm_t comm_ = nullptr;
  bool failed_ = false;
};

class DeviceBuffer {
 public:
  DeviceBuffer(const Api& api, size_t bytes) : api_(api) { check_cuda(api, api.malloc(&data_, bytes), "cudaMalloc"); }
  ~DeviceBuffer() { api_.free(data_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return data_; }

 private:
  const Api& api_;
  void* data_ = nullptr;
};

class Stream {
 public:
  explicit Stream(const Api& api) : api_(api) { check_cuda(api, api.stream_create(&stream_), "cudaStreamCreate"); }
  ~Stream() { api_.stream_destroy(stream_); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  const Api& api_;
  cudaStream_t stream_ = nullptr;
};

class NcclBackend : public AllreduceBackend {
 public:
  std::string name() const override { return "nccl"; }
  const CheckInfo& check() const override { return checks::kAllreduceNccl; }

  std::string unavailable() override {
    std::string error;
    api_ = load_api(error);
    if (api_ == nullptr) return error;
    int count = 0;
    const cudaError_t rc = api_->get_device_count(&count);
    if (rc != cudaSuccess) return std::string("no usable CUDA device: ") + api_->error_string(rc);
    return count > 0 ? "" : "no CUDA device";
  }

  // Each rank picks its GPU; rank 0 makes the communicator's id, which check_allreduce hands to every rank.
  std::string prepare(const CollectiveSetup& setup, bool root) override {
    const Api& api = *api_;
    int count = 0;
    check_cuda(api, api.get_device_count(&count), "cudaGetDeviceCount");
    check_cuda(api, api.set_device(setup.local_rank % count), "cudaSetDevice");
    if (!root) return "";
    ncclUniqueId id{};
    const ncclResult_t rc = api.get_unique_id(&id);
    if (rc != ncclSuccess) throw std::runtime_error(std::string("ncclGetUniqueId: ") + api.nccl_error_string(rc));
    return std::string(id.internal, sizeof id.internal);
  }

  std::vector<AllreduceTiming> run(Group& group, const CollectiveSetup& setup, const std::string& from_root,
                                   const std::vector<AllreduceSize>& sizes) override {
    const Api& api = *api_;
    const int ranks = static_cast<int>(group.members().size());
    ncclUniqueId id{};
    if (from_root.size() != sizeof id.internal) throw std::runtime_error("rank 0 sent a malformed NCCL id");
    std::memcpy(id.internal, from_root.data(), sizeof id.internal);
    Communicator comm(api, ranks, id, group.index(), setup.timeout);
    size_t largest = 0;
    for (const auto& size : sizes) largest = std::max(largest, size.bytes);
    const DeviceBuffer input(api, largest);
    const DeviceBuffer output(api, largest);
    const Stream stream(api);
    const std::vector<float> host(largest / sizeof(float), fill_value(group.index()));
    check_cuda(api, api.memcpy(input.get(), host.data(), largest, cudaMemcpyHostToDevice), "cudaMemcpy");
    std::vector<AllreduceTiming> timings;
    for (const auto& size : sizes) timings.push_back(time_size(comm, input, output, stream, size, ranks));
    return timings;
  }

 private:
  AllreduceTiming time_size(Communicator& comm, const DeviceBuffer& input, const DeviceBuffer& output,
                            const Stream& stream, const AllreduceSize& size, int ranks) {
    const Api& api = *api_;
    const size_t count = size.bytes / sizeof(float);
    const auto reduce = [&](int times) {
      for (int i = 0; i < times; ++i) {
        comm.finish(api.all_reduce(input.get(), output.get(), count, ncclFloat, ncclSum, comm.get(), stream.get()),
                    "ncclAllReduce");
      }
      comm.wait(stream.get());
    };
    reduce(1);  // warm-up: NCCL connects its channels on first use
    const auto start = std::chrono::steady_clock::now();
    reduce(size.iterations);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::vector<float> result(count);
    check_cuda(api, api.memcpy(result.data(), output.get(), size.bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
    const float expected = expected_sum(ranks);
    bool correct = true;
    for (const float value : result) correct = correct && value == expected;
    return {size.bytes, seconds / size.iterations, correct};
  }

  const Api* api_ = nullptr;
};

}  // namespace

std::unique_ptr<AllreduceBackend> make_nccl_backend() { return std::make_unique<NcclBackend>(); }

}  // namespace ddp::doctor
