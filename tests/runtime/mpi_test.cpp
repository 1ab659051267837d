// The MPI process group against Gloo, two ranks under mpirun, both groups in each process: every collective on
// the usual dtypes and on empty, odd and large sizes gives Gloo's result, bit for bit; bad calls are refused.
#include <gtest/gtest.h>

#include <ATen/Functions.h>
#include <gloo/config.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <iostream>

#include "core/launch.hpp"
#include "ddp_runtime/common/error_message.hpp"
#include "ddp_runtime/distributed/mpi_bootstrap.hpp"
#include "ddp_runtime/distributed/process_group.hpp"
#include "test_common.hpp"
#include "test_support.hpp"

namespace ddp::runtime {
namespace {

using ddp::testing::contains;

using RedOp = c10d::ReduceOp::RedOpType;

const std::vector<at::ScalarType> kTypes{at::kFloat, at::kDouble, at::kHalf, at::kBFloat16, at::kChar,
                                         at::kByte,  at::kShort,  at::kInt,  at::kLong};
const std::vector<int64_t> kSizes{0, 1, 21, 1000, 65537, (int64_t{1} << 20) + 3};

// LibTorch's Gloo group takes Half only where Gloo was built with PyTorch's dtypes, once its type dispatch moved to
// gloo/ProcessGroupGlooDetail.hpp (2.14 has it; Debian's Gloo is built without them).
#if __has_include(<torch/csrc/distributed/c10d/gloo/ProcessGroupGlooDetail.hpp>) && !GLOO_USE_TORCH_DTYPES
constexpr bool kGlooHasHalf = false;
#else
constexpr bool kGlooHasHalf = true;
#endif

bool gloo_supports(at::ScalarType type) {
  return type != at::kBFloat16 && type != at::kShort && type != at::kBool && (type != at::kHalf || kGlooHasHalf);
}

// Small values, so that sums and products of two ranks fit even int8; fractional for floating types.
at::Tensor input(at::ScalarType type, int64_t numel, int rank) {
  at::Tensor values = at::arange(numel, at::kLong).mul(7 * (rank + 1)).add(rank).remainder(11);
  if (type == at::kBool) return values.remainder(2).to(at::kBool);
  if (at::isFloatingType(type)) return (values.to(at::kFloat) * 0.5 + 0.125).to(type);
  return values.to(type);
}

struct Checker {
  int rank;
  int compared = 0;
  int mismatches = 0;

  void expect_equal(const at::Tensor& mpi, const at::Tensor& expected, const std::string& what) {
    ++compared;
    if (mpi.scalar_type() == expected.scalar_type() && at::equal(mpi, expected)) return;
    ++mismatches;
    std::cout << "MISMATCH rank " << rank << ": " << what << std::endl;
  }
};

at::Tensor run_allreduce(const compat::ProcessGroupPtr& group, at::Tensor tensor, RedOp op) {
  std::vector<at::Tensor> tensors{tensor};
  group->allreduce(tensors, c10d::AllreduceOptions{op})->wait();
  return tensors[0];
}

// Gloo has no AVG, nor bfloat16, int16 or bool: the reference is then Gloo's SUM divided, or the sum computed here
// from both ranks' inputs (input() is the same function of the rank everywhere).
at::Tensor reference_allreduce(const Distributed& gloo, at::ScalarType type, int64_t numel, RedOp op) {
  const RedOp gloo_op = op == RedOp::AVG ? RedOp::SUM : op;
  at::Tensor result;
  if (gloo_supports(type)) {
    result = run_allreduce(gloo.group, input(type, numel, gloo.rank), gloo_op);
  } else {
    at::Tensor a = input(type, numel, 0).to(at::kFloat);
    const at::Tensor b = input(type, numel, 1).to(at::kFloat);
    switch (gloo_op) {
      case RedOp::PRODUCT: result = a * b; break;
      case RedOp::MIN: result = at::minimum(a, b); break;
      case RedOp::MAX: result = at::maximum(a, b); break;
      default: result = a + b;
    }
    result = result.to(type);
  }
  return op == RedOp::AVG ? result.div_(gloo.world_size) : result;
}

void compare_allreduce(Checker& check, const Distributed& mpi, const Distributed& gloo) {
  for (const at::ScalarType type : kTypes) {
    std::vector<RedOp> ops{RedOp::SUM, RedOp::MIN, RedOp::MAX, RedOp::PRODUCT};
    if (at::isFloatingType(type)) ops.push_back(RedOp::AVG);
    for (const RedOp op : ops) {
      for (const int64_t numel : kSizes) {
        const at::Tensor got = run_allreduce(mpi.group, input(type, numel, mpi.rank), op);
        check.expect_equal(
            got, reference_allreduce(gloo, type, numel, op),
            "all-reduce op " + std::to_string(int(op)) + " of " + std::to_string(numel) + " " + c10::toString(type));
      }
    }
  }
}

at::Tensor run_broadcast(const compat::ProcessGroupPtr& group, at::Tensor tensor, int root) {
  std::vector<at::Tensor> tensors{tensor};
  c10d::BroadcastOptions options;
  options.rootRank = root;
  group->broadcast(tensors, options)->wait();
  return tensors[0];
}

std::vector<at::Tensor> run_allgather(const compat::ProcessGroupPtr& group, const at::Tensor& tensor) {
  std::vector<std::vector<at::Tensor>> outputs{{at::empty_like(tensor), at::empty_like(tensor)}};
  std::vector<at::Tensor> inputs{tensor};
  group->allgather(outputs, inputs)->wait();
  return outputs[0];
}

void compare_broadcast_and_allgather(Checker& check, const Distributed& mpi, const Distributed& gloo) {
  std::vector<at::ScalarType> types = kTypes;
  types.push_back(at::kBool);
  for (const at::ScalarType type : types) {
    for (const int64_t numel : kSizes) {
      const std::string what = std::to_string(numel) + " " + c10::toString(type);
      const at::Tensor mine = input(type, numel, mpi.rank);
      for (int root = 0; root < 2; ++root) {
        const at::Tensor expected =
            gloo_supports(type) ? run_broadcast(gloo.group, mine.clone(), root) : input(type, numel, root);
        check.expect_equal(run_broadcast(mpi.group, mine.clone(), root), expected,
                           "broadcast from " + std::to_string(root) + " of " + what);
      }
      const std::vector<at::Tensor> gathered = run_allgather(mpi.group, mine);
      // Gloo's all-gather divides by zero on empty tensors (SIGFPE in libgloo 1.13).
      const std::vector<at::Tensor> expected =
          gloo_supports(type) && numel > 0 ? run_allgather(gloo.group, mine)
                                           : std::vector<at::Tensor>{input(type, numel, 0), input(type, numel, 1)};
      for (std::size_t r = 0; r < expected.size(); ++r) {
        check.expect_equal(gathered[r], expected[r], "all-gather slot " + std::to_string(r) + " of " + what);
      }
    }
  }
}

void expect_refused(const std::string& what, const std::function<void()>& call) {
  try {
    call();
    std::cout << "ACCEPTED " << what << std::endl;
  } catch (const std::exception& e) {
    std::cout << "refused " << what << ": " << error_summary(e) << std::endl;
  }
}

// Without CUDA in this LibTorch, a tensor on the meta device stands in for one on a GPU. LibTorch 2.x dispatches a
// ProcessGroup's calls by device, and has no meta kernel for them: the group's backend gets the tensor directly.
void try_bad_calls(const Distributed& mpi) {
  expect_refused("device", [&] {
    std::vector<at::Tensor> tensors{at::empty({4}, at::device(at::kMeta))};
#if !DDP_TORCH_AT_LEAST(2, 0)
    mpi.group->allreduce(tensors)->wait();
#else
    mpi.group->getBackend(c10::DeviceType::CPU)->allreduce(tensors)->wait();
#endif
  });
  expect_refused("complex", [&] { run_allreduce(mpi.group, at::zeros({4}, at::kComplexFloat), RedOp::SUM); });
  expect_refused("int average", [&] { run_allreduce(mpi.group, at::zeros({4}, at::kInt), RedOp::AVG); });
  expect_refused("float bitwise", [&] { run_allreduce(mpi.group, at::zeros({4}), RedOp::BAND); });
  expect_refused("strided", [&] { run_allreduce(mpi.group, at::zeros({4, 4}).t(), RedOp::SUM); });
  expect_refused("two tensors", [&] {
    std::vector<at::Tensor> tensors{at::zeros({2}), at::zeros({2})};
    mpi.group->allreduce(tensors);
  });
}

int mpi_collectives_worker() {
  const Launch launch = launch_from_environment(process_environment());
  const Distributed gloo = init_distributed(launch, Backend::Gloo, std::chrono::seconds(60));
  const Distributed mpi = init_distributed(launch, Backend::Mpi, std::chrono::seconds(60));
  Checker check{mpi.rank};
  compare_allreduce(check, mpi, gloo);
  compare_broadcast_and_allgather(check, mpi, gloo);
  mpi.group->barrier()->wait();
  std::cout << "rank " << mpi.rank << " compared " << check.compared << " results with " << check.mismatches
            << " mismatches" << std::endl;
  finalize_mpi();
  return check.mismatches == 0 ? 0 : 1;
}

int mpi_refusals_worker() {
  const Distributed mpi =
      init_distributed(launch_from_environment(process_environment()), Backend::Mpi, std::chrono::seconds(60));
  try_bad_calls(mpi);
  finalize_mpi();
  return 0;
}

testing::Result run_mpi_worker(int ranks, const std::string& name) {
  return testing::run(testing::mpirun_command(ranks, {testing::self_path()}), {{"RUNTIME_TEST_WORKER", name}});
}

TEST(MpiProcessGroup, CollectivesGiveTheResultsOfGlooForEveryDtypeAndSize) {
  if (const std::string why = testing::mpi_missing(); !why.empty()) GTEST_SKIP() << why;
  const testing::Result result = run_mpi_worker(2, "mpi-collectives");
  ASSERT_EQ(result.status, 0) << result.output;
  // 9 dtypes x 6 sizes x 4 ops, AVG on 4 floating types; broadcast from 2 roots and all-gather to 2 slots, on
  // 10 dtypes (bool too) x 6 sizes.
  const int expected = 9 * 6 * 4 + 4 * 6 + 10 * 6 * 4;
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_TRUE(contains(result.output, "rank " + std::to_string(rank) + " compared " + std::to_string(expected) +
                                            " results with 0 mismatches"))
        << result.output;
  }
}

TEST(MpiProcessGroup, RefusesGpuTensorsAndCallsItCannotServeNamingTheFix) {
  if (const std::string why = testing::mpi_missing(); !why.empty()) GTEST_SKIP() << why;
  const testing::Result result = run_mpi_worker(1, "mpi-refusals");
  ASSERT_EQ(result.status, 0) << result.output;
  EXPECT_FALSE(contains(result.output, "ACCEPTED")) << result.output;
  for (const std::string line :
       {"refused device: MPI all-reduce takes CPU tensors, got one on meta; GPU training uses NCCL "
        "(DDP_BACKEND=nccl or auto), or copy the tensor to the CPU first\n",
        "refused complex: MPI all-reduce cannot reduce ComplexFloat tensors; use float, double, half, bfloat16 or "
        "an integer type\n",
        "refused int average: MPI all-reduce with AVG on Int tensors would round; reduce with SUM and divide\n",
        "refused float bitwise: MPI all-reduce with BAND on Float tensors is undefined; bitwise ops take integer "
        "tensors\n",
        "refused strided: MPI all-reduce takes dense contiguous tensors; call .contiguous() first\n",
        "refused two tensors: MPI all-reduce takes one tensor per call (one device per process), got 2; call it "
        "once per tensor\n"}) {
    EXPECT_TRUE(contains(result.output, line)) << "missing '" << line << "' in\n" << result.output;
  }
}

}  // namespace

namespace testing {

int mpi_worker(const std::string& name) {
  if (name == "mpi-collectives") return mpi_collectives_worker();
  if (name == "mpi-refusals") return mpi_refusals_worker();
  std::cerr << "unknown worker " << name << std::endl;
  return 2;
}

}  // namespace testing
}  // namespace ddp::runtime
