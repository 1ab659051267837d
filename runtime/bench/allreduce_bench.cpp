// All-reduce through the c10d API, MPI group against Gloo group, side by side like nccl-tests' all_reduce_perf:
// float SUM, in place, from 84 B (the seed model's 21 gradients) to 64 MB. Run under mpirun:
//   mpirun -np 2 allreduce_bench
// Times are the mean over many calls of allreduce()+wait() on rank 0, so they include the MPI thread's hand-off.
#include <ATen/Functions.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "core/launch.hpp"
#include "ddp_runtime/distributed/mpi_bootstrap.hpp"
#include "ddp_runtime/distributed/process_group.hpp"

namespace {

using namespace ddp;
using namespace ddp::runtime;

// Enough calls for about 0.2 s of MPI or 0.1 s of Gloo at their speeds here, and no fewer than 10.
int64_t calls_for(int64_t bytes, int64_t budget_bytes, int64_t most) {
  return std::clamp<int64_t>(budget_bytes / std::max<int64_t>(bytes, 1), 10, most);
}

double mean_us(const Distributed& dist, at::Tensor& tensor, int64_t calls) {
  std::vector<at::Tensor> tensors{tensor};
  for (int i = 0; i < 3; ++i) dist.group->allreduce(tensors)->wait();
  dist.group->barrier()->wait();
  const auto start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < calls; ++i) dist.group->allreduce(tensors)->wait();
  const std::chrono::duration<double, std::micro> elapsed = std::chrono::steady_clock::now() - start;
  return elapsed.count() / double(calls);
}

}  // namespace

int main() {
  const Launch launch = launch_from_environment(process_environment());
  const Distributed gloo = init_distributed(launch, Backend::Gloo, std::chrono::seconds(120));
  const Distributed mpi = init_distributed(launch, Backend::Mpi, std::chrono::seconds(120));
  std::vector<int64_t> sizes{84};
  for (int64_t bytes = 256; bytes <= (int64_t{64} << 20); bytes *= 4) sizes.push_back(bytes);
  const double bus_factor = 2.0 * (mpi.world_size - 1) / mpi.world_size;  // nccl-tests' busbw for all-reduce
  if (mpi.rank == 0) {
    std::printf("all-reduce, float SUM in place, %d ranks, c10d allreduce()+wait(), mean time per call\n",
                mpi.world_size);
    std::printf("%12s %10s | %10s %8s %8s | %10s %8s %8s | %10s\n", "size (B)", "count", "MPI us", "algbw", "busbw",
                "Gloo us", "algbw", "busbw", "Gloo/MPI");
  }
  for (const int64_t bytes : sizes) {
    at::Tensor tensor = at::zeros({bytes / 4});
    const double mpi_us = mean_us(mpi, tensor, calls_for(bytes, int64_t{400} << 20, 20000));
    const double gloo_us = mean_us(gloo, tensor, calls_for(bytes, int64_t{100} << 20, 100));
    const double mpi_gbs = double(bytes) / mpi_us / 1e3;
    const double gloo_gbs = double(bytes) / gloo_us / 1e3;
    if (mpi.rank == 0) {
      std::printf("%12lld %10lld | %10.2f %8.3f %8.3f | %10.2f %8.3f %8.3f | %10.1f\n", static_cast<long long>(bytes),
                  static_cast<long long>(bytes / 4), mpi_us, mpi_gbs, mpi_gbs * bus_factor, gloo_us, gloo_gbs,
                  gloo_gbs * bus_factor, gloo_us / mpi_us);
    }
  }
  finalize_mpi();
  return 0;
}
