#include "ddp_runtime/distributed/mpi_process_group.hpp"

#include "core/error.hpp"

#ifdef DDP_WITH_MPI
#include <ATen/core/ivalue.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <mpi.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <algorithm>
#include <array>
#include <climits>
#include <cstdlib>
#include <functional>

#include "ddp_runtime/distributed/mpi_bootstrap.hpp"
#endif

namespace ddp::runtime {

#ifdef DDP_WITH_MPI
namespace {

using TensorList = std::vector<at::Tensor>;
using RedOp = c10d::ReduceOp::RedOpType;

// ------------------------------------------------------------------------------------------ checks (caller's thread)

void check_cpu_tensor(const at::Tensor& tensor, const char* operation) {
  if (!tensor.device().is_cpu()) {
    throw Error(std::string("MPI ") + operation + " takes CPU tensors, got one on " + tensor.device().str() +
                "; GPU training uses NCCL (DDP_BACKEND=nccl or auto), or copy the tensor to the CPU first");
  }
  if (tensor.layout() != at::kStrided || !tensor.is_contiguous()) {
    throw Error(std::string("MPI ") + operation + " takes dense contiguous tensors; call .contiguous() first");
  }
}

const at::Tensor& single_cpu_tensor(const TensorList& tensors, const char* operation) {
  if (tensors.size() != 1) {
    throw Error(std::string("MPI ") + operation + " takes one tensor per call (one device per process), got " +
                std::to_string(tensors.size()) + "; call it once per tensor");
  }
  check_cpu_tensor(tensors.front(), operation);
  return tensors.front();
}

// Element types all-reduce supports; broadcast and all-gather move bytes and take any type.
MPI_Datatype reduction_type(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return MPI_FLOAT;
    case at::kDouble: return MPI_DOUBLE;
    case at::kHalf:
    case at::kBFloat16: return MPI_UINT16_T;  // reduced by the ops of float16_op below
    case at::kChar: return MPI_INT8_T;
    case at::kByte: return MPI_UINT8_T;
    case at::kShort: return MPI_INT16_T;
    case at::kInt: return MPI_INT32_T;
    case at::kLong: return MPI_INT64_T;
    default:
      throw Error(std::string("MPI all-reduce cannot reduce ") + c10::toString(type) +
                  " tensors; use float, double, half, bfloat16 or an integer type");
  }
}

const char* op_name(RedOp op) {
  static constexpr std::array<const char*, 10> names{"SUM",  "AVG", "PRODUCT", "MIN",        "MAX",
                                                     "BAND", "BOR", "BXOR",    "PREMUL_SUM", "UNUSED"};
  return op < names.size() ? names[op] : "?";
}

void check_reduction(at::ScalarType type, RedOp op) {
  reduction_type(type);
  const bool floating = at::isFloatingType(type);
  const std::string what =
      std::string("MPI all-reduce with ") + op_name(op) + " on " + c10::toString(type) + " tensors";
  switch (op) {
    case RedOp::SUM:
    case RedOp::PRODUCT:
    case RedOp::MIN:
    case RedOp::MAX: return;
    case RedOp::AVG:
      if (!floating) throw Error(what + " would round; reduce with SUM and divide");
      return;
    case RedOp::BAND:
    case RedOp::BOR:
    case RedOp::BXOR:
      if (floating) throw Error(what + " is undefined; bitwise ops take integer tensors");
      return;
    default: throw Error(what + " is not supported; use SUM, AVG, PRODUCT, MIN, MAX, or BAND, BOR, BXOR on integers");
  }
}

// ------------------------------------------------------------------------------------------ MPI thread only

// MPI has no 16-bit float types: half and bfloat16 travel as MPI_UINT16_T and are combined in float by
// user-defined ops.
template <class T, class Combine>
void combine_16bit(void* in, void* inout, int* length, MPI_Datatype*) {
  const auto* a = static_cast<const T*>(in);
  auto* b = static_cast<T*>(inout);
  for (int i = 0; i < *length; ++i) b[i] = T(Combine()(static_cast<float>(a[i]), static_cast<float>(b[i])));
}

struct Min {
  float operator()(float a, float b) const { return std::min(a, b); }
};
struct Max {
  float operator()(float a, float b) const { return std::max(a, b); }
};

template <class T>
MPI_Op float16_op(RedOp op) {
  static const std::array<MPI_Op, 4> ops = [] {
    std::array<MPI_Op, 4> created{};
    MPI_Op_create(&combine_16bit<T, std::plus<float>>, 1, &created[0]);
    MPI_Op_create(&combine_16bit<T, std::multiplies<float>>, 1, &created[1]);
    MPI_Op_create(&combine_16bit<T, Min>, 1, &created[2]);
    MPI_Op_create(&combine_16bit<T, Max>, 1, &created[3]);
    return created;
  }();
  switch (op) {
    case RedOp::PRODUCT: return ops[1];
    case RedOp::MIN: return ops[2];
    case RedOp::MAX: return ops[3];
    default: return ops[0];  // SUM, AVG
  }
}

MPI_Op mpi_op(at::ScalarType type, RedOp op) {
  if (type == at::kHalf) return float16_op<c10::Half>(op);
  if (type == at::kBFloat16) return float16_op<c10::BFloat16>(op);
  switch (op) {
    case RedOp::PRODUCT: return MPI_PROD;
    case RedOp::MIN: return MPI_MIN;
    case RedOp::MAX: return MPI_MAX;
    case RedOp::BAND: return MPI_BAND;
    case RedOp::BOR: return MPI_BOR;
    case RedOp::BXOR: return MPI_BXOR;
    default: return MPI_SUM;  // SUM, AVG
  }
}

// MPI counts are ints: larger tensors go in parts of at most INT_MAX elements.
template <class Call>
void in_parts(char* data, int64_t count, int64_t element_bytes, const Call& call) {
  for (int64_t done = 0; done < count; done += INT_MAX) {
    call(data + done * element_bytes, static_cast<int>(std::min<int64_t>(count - done, INT_MAX)));
  }
}

char* bytes_of(const at::Tensor& tensor) { return static_cast<char*>(tensor.data_ptr()); }

// ------------------------------------------------------------------------------------------ the group

// Completed by the MPI thread: the Work for wait() (the trainer), its future for the Reducer's comm hook.
class MpiWork : public c10d::Work {
 public:
  MpiWork(int rank, c10d::OpType type, TensorList outputs)
      : Work(rank, type),
        outputs_(std::move(outputs)),
        future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}

  void complete(const std::exception_ptr& error) {
    if (error) {
      future_->setError(error);
    } else {
      future_->markCompleted(c10::IValue(outputs_));
    }
    finish(error);
  }

  TensorList result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  TensorList outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

class MpiGroup final : public compat::GroupImplementation {
 public:
  MpiGroup(int rank, int size, std::chrono::milliseconds timeout)
      : compat::GroupImplementation(rank, size), timeout_(timeout) {}

  const std::string getBackendName() const override { return "mpi"; }

  c10::intrusive_ptr<c10d::Work> broadcast(TensorList& tensors, const c10d::BroadcastOptions& opts) override {
    const at::Tensor tensor = single_cpu_tensor(tensors, "broadcast");
    if (opts.rootRank < 0 || opts.rootRank >= getSize() || opts.rootTensor != 0) {
      throw Error("MPI broadcast from rank " + std::to_string(opts.rootRank) + " (tensor " +
                  std::to_string(opts.rootTensor) + "): the root must be a rank below " + std::to_string(getSize()) +
                  " and the tensor 0");
    }
    const int root = static_cast<int>(opts.rootRank);
    return post(c10d::OpType::BROADCAST, {"broadcast", int64_t(tensor.nbytes())}, tensors, [tensor, root] {
      in_parts(bytes_of(tensor), int64_t(tensor.nbytes()), 1,
               [root](char* data, int count) { MPI_Bcast(data, count, MPI_BYTE, root, MPI_COMM_WORLD); });
    });
  }

  // DDP's Reducer sends SUM of gradients it has already divided by the world size (_AllReduceBySumCommHook);
  // AVG is for other callers.
  c10::intrusive_ptr<c10d::Work> allreduce(TensorList& tensors, const c10d::AllreduceOptions& opts) override {
    const at::Tensor tensor = single_cpu_tensor(tensors, "all-reduce");
    const RedOp op = opts.reduceOp;
    check_reduction(tensor.scalar_type(), op);
    const int size = getSize();
    return post(c10d::OpType::ALLREDUCE, {"all-reduce", int64_t(tensor.nbytes())}, tensors, [tensor, op, size] {
      const MPI_Datatype type = reduction_type(tensor.scalar_type());
      const MPI_Op mpi = mpi_op(tensor.scalar_type(), op);
      in_parts(bytes_of(tensor), tensor.numel(), int64_t(tensor.element_size()),
               [&](char* data, int count) { MPI_Allreduce(MPI_IN_PLACE, data, count, type, mpi, MPI_COMM_WORLD); });
      if (op == RedOp::AVG) tensor.div_(size);
    });
  }

  c10::intrusive_ptr<c10d::Work> allgather(std::vector<TensorList>& outputs, TensorList& inputs,
                                           const c10d::AllgatherOptions&) override {
    const at::Tensor input = single_cpu_tensor(inputs, "all-gather");
    if (outputs.size() != 1) {
      throw Error("MPI all-gather takes one list of output tensors per call, got " + std::to_string(outputs.size()));
    }
    TensorList targets = outputs.front();
    check_gather_targets(input, targets);
    const int64_t bytes = int64_t(input.nbytes());
    if (bytes > INT_MAX) {
      throw Error("MPI all-gather of " + std::to_string(bytes) + " bytes per rank is above MPI's limit of " +
                  std::to_string(INT_MAX) + "; gather in parts");
    }
    return post(c10d::OpType::ALLGATHER, {"all-gather", bytes}, targets, [input, targets] {
      const at::Tensor gathered = at::empty({int64_t(targets.size()), input.numel()}, input.options());
      MPI_Allgather(bytes_of(input), int(input.nbytes()), MPI_BYTE, bytes_of(gathered), int(input.nbytes()), MPI_BYTE,
                    MPI_COMM_WORLD);
      for (std::size_t r = 0; r < targets.size(); ++r) targets[r].view(-1).copy_(gathered[int64_t(r)]);
    });
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions&) override {
    return post(c10d::OpType::BARRIER, {"barrier", 0}, {}, [] { MPI_Barrier(MPI_COMM_WORLD); });
  }

 private:
  void check_gather_targets(const at::Tensor& input, const TensorList& targets) const {
    if (int64_t(targets.size()) != getSize()) {
      throw Error("MPI all-gather needs one output tensor per rank, got " + std::to_string(targets.size()) + " for " +
                  std::to_string(getSize()) + " ranks");
    }
    for (const at::Tensor& target : targets) {
      check_cpu_tensor(target, "all-gather");
      if (target.numel() != input.numel() || target.scalar_type() != input.scalar_type()) {
        throw Error("MPI all-gather output of " + std::to_string(target.numel()) + " " +
                    c10::toString(target.scalar_type()) + " does not match the input's " +
                    std::to_string(input.numel()) + " " + c10::toString(input.scalar_type()));
      }
    }
  }

  // Errors of MPI itself abort the job (MPI_ERRORS_ARE_FATAL); an exception of ours reaches the Work.
  c10::intrusive_ptr<c10d::Work> post(c10d::OpType type, MpiCallInfo info, TensorList outputs,
                                      std::function<void()> collective) {
    auto work = c10::make_intrusive<MpiWork>(getRank(), type, std::move(outputs));
    post_mpi_call(
        [work, collective = std::move(collective)] {
          std::exception_ptr error;
          try {
            collective();
          } catch (...) {
            error = std::current_exception();
          }
          work->complete(error);
        },
        info, getRank(), timeout_);
    return work;
  }

  std::chrono::milliseconds timeout_;
};

// A task of srun finds its MPI peers only through Slurm's PMIx plugin; without it, OpenMPI's MPI_Init aborts with a
// page about PMI support.
void require_pmix_under_srun(const Launch& launch) {
  if (launch.srun_without_pmix) {
    throw Error(
        "backend mpi under srun needs Slurm's PMIx plugin to start MPI; launch with srun --mpi=pmix --ddp=mpi "
        "(or set MpiDefault=pmix in slurm.conf), or use --ddp=gloo");
  }
}

}  // namespace

compat::ProcessGroupPtr make_mpi_group(const Launch& launch, std::chrono::milliseconds timeout) {
  require_pmix_under_srun(launch);
  const MpiWorld world = init_mpi();
  if (world.rank != launch.rank || world.size != launch.world_size) {
    throw Error("backend mpi: MPI started this process as rank " + std::to_string(world.rank) + " of " +
                std::to_string(world.size) + " but the launcher's environment says rank " +
                std::to_string(launch.rank) + " of " + std::to_string(launch.world_size) +
                "; start the ranks with mpirun -np N or srun --mpi=pmix");
  }
  start_mpi_thread();
  return compat::as_host_process_group(c10::make_intrusive<MpiGroup>(launch.rank, launch.world_size, timeout));
}

#else

compat::ProcessGroupPtr make_mpi_group(const Launch&, std::chrono::milliseconds) {
  throw Error(
      "backend mpi: the MPI process group is not built into this ddp-train (MPI was not found at configure "
      "time); install libopenmpi-dev and rebuild, or use DDP_BACKEND=gloo (srun --ddp=gloo)");
}

#endif

}  // namespace ddp::runtime
