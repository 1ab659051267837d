#pragma once
// Slow nodes named before training: one node that computes or moves memory slower than the others (a throttled or
// misconfigured CPU, a busy neighbour, memory on the wrong NUMA setting) slows every step of a DDP run. Each node's
// leader measures, at the same time as the others:
//   node.compute    single-precision GEMM (the BLAS of libblas.so.3 where there is one, else a blocked loop) on the
//                   task's CPUs, in GFLOP/s
//   node.memory_bw  STREAM's triad a = b + s*c over arrays far larger than the caches, one thread per usable core,
//                   in GB/s
// each the best of up to 3 runs that repeat their kernel for at least 0.2 s (1 s without --quick), so that a node
// that time-shares its cores with another job, or runs under a CPU quota, shows the share it gets; and rank 0 marks
// WARN every node below the median of all nodes by more than the threshold (--straggler-threshold, 20% as
// ddp-train's). On GPUs the measure is of the node's CPUs: a GEMM on the GPU is not measured here.
#include <chrono>
#include <vector>

#include "doctor/checks/check.hpp"

namespace ddp::doctor {

// The two measurements of this node, Ok until graded; `quick` uses smaller matrices and arrays. Each runs up to 3
// times, the GEMM within the first half of `budget` and STREAM within the rest; the first run of each always
// completes (0.2 s, or 1 s without `quick`, and one kernel more).
std::vector<CheckResult> measure_node_speed(bool quick, std::chrono::milliseconds budget);

// Rank 0, on every rank's results: node.compute and node.memory_bw rows below the median of their kind by more than
// `threshold_pct` percent become WARN, saying by how much; the others say the median they were compared with.
void grade_node_speeds(std::vector<CheckResult>& all, double threshold_pct);

}  // namespace ddp::doctor
