#!/usr/bin/env bash
# Every figure of docs/figures.md's table, from one run on this machine, each section headed by the command that made it:
#   sudo bench/run-all.sh [BUILD_DIR]        (default: build; needs root for the test cluster)
# The core's per-task cost, the topology's, ddp-train and the all-reduces against Python DDP and Gloo, snapshot
# costs (runtime/bench/run_bench.sh), how reliably a slow rank is named (straggler_bench.sh), srun --ddp against plain
# srun and PyTorch's rendezvous by node count (scale_bench.sh), how fast a broken step ends (failure_bench.sh), and
# ddp-doctor's link and all-reduce figures on the test cluster (cluster_doctor prints its healthy run's table).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build}

section() { printf '\n==== %s\n' "$*"; }

cmake --build "$BUILD" -j 2 --target core_bench topology_bench ddp-doctor >/dev/null
section "$BUILD/bench/core_bench"
"$BUILD/bench/core_bench"
section "$BUILD/bench/topology_bench"
"$BUILD/bench/topology_bench"
section "runtime/bench/run_bench.sh $BUILD"
"$ROOT/runtime/bench/run_bench.sh" "$BUILD"
section "bench/straggler_bench.sh $BUILD"
"$ROOT/bench/straggler_bench.sh" "$BUILD"
section "bench/srun_overhead.sh $BUILD"
"$ROOT/bench/srun_overhead.sh" "$BUILD"
section "bench/scale_bench.sh $BUILD"
"$ROOT/bench/scale_bench.sh" "$BUILD"
section "bench/failure_bench.sh $BUILD"
"$ROOT/bench/failure_bench.sh" "$BUILD"
section "ctest --test-dir $BUILD -R '^cluster_doctor\$' -V   (the healthy run's link and all-reduce rows)"
ctest --test-dir "$BUILD" -R '^cluster_doctor$' -V | grep -E 'net\.p2p_(bw|rtt)|allreduce\.gloo|tests passed' || true
