#pragma once
// The benchmarks' one clock: the mean wall time of a call, over many calls.
#include <chrono>

namespace ddp::bench {

// Runs body(0) .. body(calls - 1) and returns the mean time of one call in microseconds.
template <typename Body>
double microseconds_per_call(int calls, Body&& body) {
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) body(i);
  const std::chrono::duration<double, std::micro> elapsed = std::chrono::steady_clock::now() - start;
  return elapsed.count() / calls;
}

}  // namespace ddp::bench
