// How long an asynchronous snapshot keeps training waiting, against a synchronous save of the same state.
// The state is an MLP-like set of float tensors of the given total size; the directory is the one to measure
// (shared storage in production). Prints one line per size.
//   snapshot_bench DIR [MB ...]
#include <ATen/Functions.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "ddp_runtime/snapshot.hpp"

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kRounds = 5;

ddp::runtime::SnapshotContent state_of(double megabytes) {
  ddp::runtime::SnapshotContent content;
  const auto floats = static_cast<int64_t>(megabytes * 1024 * 1024 / 4);
  const int64_t layer = std::min<int64_t>(floats, 1024 * 1024);
  for (int64_t done = 0, i = 0; done < floats; done += layer, ++i) {
    content.model_state.emplace_back("layer" + std::to_string(i) + ".weight", at::rand({std::min(layer, floats - done)}));
  }
  content.rng_state = at::zeros({5056}, at::kByte);
  return content;
}

double milliseconds(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

void measure(const std::string& dir, double megabytes) {
  ddp::runtime::SnapshotContent state = state_of(megabytes);
  ddp::runtime::SnapshotStore store(dir, 2);
  double sync_total = 0;
  for (int round = 0; round < kRounds; ++round) {
    state.progress.global_step = round;
    const auto start = Clock::now();
    store.save(state);
    sync_total += milliseconds(Clock::now() - start);
  }
  // The first asynchronous save allocates the staging buffers; later ones reuse them, as a training run does.
  store.save_async(state, [](const std::string&) {});
  store.wait();
  const double first_blocked = store.blocked().count() * 1000;
  for (int round = 0; round < kRounds; ++round) {
    state.progress.global_step = kRounds + round;
    store.save_async(state, [](const std::string&) {});
    store.wait();  // training runs while the write goes on; only save_async's own time counts as blocking
  }
  const double blocked = (store.blocked().count() * 1000 - first_blocked) / kRounds;
  const double sync = sync_total / kRounds;
  std::printf("%8.1f MB | synchronous save %9.2f ms | async blocks %7.2f ms (%5.2f%%) | first async (allocates) %8.2f ms\n",
              megabytes, sync, blocked, 100 * blocked / sync, first_blocked);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: snapshot_bench DIR [MB ...]\n");
    return 2;
  }
  std::vector<double> sizes;
  for (int i = 2; i < argc; ++i) sizes.push_back(std::atof(argv[i]));
  if (sizes.empty()) sizes = {8.4, 100, 400};
  for (const double mb : sizes) measure(argv[1], mb);
  return 0;
}
