// What a snapshot of a state of the given size costs when written synchronously (what torch.save does), and
// the copy an asynchronous snapshot makes before training may change the state again (the most it can block
// training, when nothing overlaps it; ddp-train overlaps it with forward and backward). The state is a set of
// float tensors; DIR is the directory to measure (shared storage in production).
//   snapshot_bench DIR [MiB ...]
#include <ATen/Functions.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "ddp_runtime/snapshots/snapshot.hpp"

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kRounds = 5;

ddp::runtime::SnapshotContent state_of(double megabytes) {
  ddp::runtime::SnapshotContent content;
  const auto floats = static_cast<int64_t>(megabytes * 1024 * 1024 / 4);
  const int64_t layer = std::min<int64_t>(floats, 1024 * 1024);
  for (int64_t done = 0, i = 0; done < floats; done += layer, ++i) {
    content.model_state.emplace_back("layer" + std::to_string(i) + ".weight",
                                     at::rand({std::min(layer, floats - done)}));
  }
  // SGD with momentum, as ddp-train's built-in workloads train: one buffer the size of each parameter.
  content.optimizer.emplace();
  content.optimizer->momentum = 0.9;
  for (const auto& [name, tensor] : content.model_state) {
    content.optimizer->per_param.push_back({{"momentum_buffer", at::rand_like(tensor)}});
  }
  content.rng_state = at::zeros({5056}, at::kByte);
  return content;
}

double milliseconds(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

void measure(const std::string& dir, double megabytes) {
  ddp::runtime::SnapshotContent state = state_of(megabytes);
  ddp::runtime::SnapshotStore store(dir, 2, "bench", [](const std::string&) {});
  double sync_total = 0;
  for (int round = 0; round < kRounds; ++round) {
    state.progress.global_step = round;
    const auto start = Clock::now();
    store.save(state);
    sync_total += milliseconds(Clock::now() - start);
  }
  // The first asynchronous save allocates the staging buffers; later ones reuse them, as a training run does.
  double copy_total = 0;
  for (int round = 0; round <= kRounds; ++round) {
    state.progress.global_step = kRounds + round;
    const auto start = Clock::now();
    store.save_async(state, [](const std::string&) {});
    store.before_update();
    if (round > 0) copy_total += milliseconds(Clock::now() - start);
    store.wait();
  }
  const double sync = sync_total / kRounds;
  const double copy = copy_total / kRounds;
  std::printf("%8.1f MiB | synchronous save %9.2f ms | async copy, no overlap %7.2f ms (%5.2f%%)\n", megabytes, sync,
              copy, 100 * copy / sync);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: snapshot_bench DIR [MiB ...]\n");
    return 2;
  }
  std::vector<double> sizes;
  for (int i = 2; i < argc; ++i) sizes.push_back(std::atof(argv[i]));
  if (sizes.empty()) sizes = {8.4, 100, 400};
  for (const double mb : sizes) measure(argv[1], mb);
  return 0;
}
