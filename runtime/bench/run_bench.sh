#!/usr/bin/env bash
# Side by side on this machine: ddp-train against the same training in Python DDP (Debian's python3-torch),
# 2 ranks on Gloo over 127.0.0.1, the seed workload and an MLP of width 1024; then the time an asynchronous
# snapshot blocks training against a synchronous save of the same state.
#   runtime/bench/run_bench.sh [BUILD_DIR]      (default: build; configures and builds what is missing)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$ROOT/build}
PYTHON=/usr/bin/python3  # Debian's, which has torch
SEED_EPOCHS=${SEED_EPOCHS:-40}
MLP_EPOCHS=${MLP_EPOCHS:-4}
ROUNDS=${ROUNDS:-5}

[ -f "$BUILD/CMakeCache.txt" ] || cmake -S "$ROOT" -B "$BUILD" -G Ninja >/dev/null
cmake --build "$BUILD" -j 2 --target ddp-train snapshot_bench >/dev/null
DDP_TRAIN=$BUILD/runtime/ddp-train
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# Two ranks with the variables srun --ddp exports; prints rank 0's samples/s.
two_ranks() {
  local port=$((20000 + RANDOM % 10000)) rank
  for rank in 0 1; do
    env RANK=$rank LOCAL_RANK=$rank WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
        OMP_NUM_THREADS=1 "$@" >"$WORK/rank$rank.log" 2>&1 &
  done
  wait
  sed -n 's/^Trained .*: \([0-9]*\) samples\/s$/\1/p' "$WORK/rank0.log"
}

median() { sort -n | sed -n "$((($1 + 1) / 2))p"; }

# Alternating runs, median of each: on a shared 2-core machine single runs of a latency-bound loop vary by 30%.
compare() {  # name, epochs, workload arguments
  local name=$1 epochs=$2 round cpp=() python=()
  shift 2
  for ((round = 0; round < ROUNDS; round++)); do
    cpp+=("$(two_ranks "$DDP_TRAIN" --snapshot-dir "$WORK/snapshots-$name" --output "$WORK/final.pt" "$@" "$epochs" 0)")
    python+=("$(two_ranks "$PYTHON" "$ROOT/runtime/bench/python_ddp.py" "$@" "$epochs")")
  done
  local cpp_median python_median
  cpp_median=$(printf '%s\n' "${cpp[@]}" | median "$ROUNDS")
  python_median=$(printf '%s\n' "${python[@]}" | median "$ROUNDS")
  printf '%-20s | %10s | %10s | %5.2f   (runs: C++ %s; Python %s)\n' "$name" "$cpp_median" "$python_median" \
    "$(echo "$cpp_median / $python_median" | bc -l)" "${cpp[*]}" "${python[*]}"
}

echo "DDP training, 2 ranks, Gloo, batch 32 per rank, samples/s, median of $ROUNDS (this machine: $(nproc) cores)"
printf '%-20s | %10s | %10s | %s\n' workload "ddp-train" "Python DDP" "C++/Python"
compare "seed Linear(20,1)" "$SEED_EPOCHS" --workload seed
compare "MLP width 1024" "$MLP_EPOCHS" --workload mlp --width 1024
echo
mlp_mib() { echo "scale=1; (20*$1 + $1 + 2*($1*$1 + $1) + $1 + 1) * 4 / 1048576" | bc; }

# ddp-train's own account of a run with a snapshot every epoch: "Snapshots: N ...; training blocked X ms".
snapshot_run() {  # width, samples, epochs
  two_ranks "$DDP_TRAIN" --workload mlp --width "$1" --samples "$2" --snapshot-dir "$WORK/snap-$1" --keep 1 \
    --output "$WORK/final.pt" "$3" 1 >/dev/null
  local line blocked count
  line=$(grep '^Snapshots: ' "$WORK/rank0.log")
  count=$(echo "$line" | sed -E 's/^Snapshots: ([0-9]+) .*/\1/')
  blocked=$(echo "$line" | sed -E 's/.*blocked ([0-9.]+) ms.*/\1/')
  echo "scale=2; $blocked / $count" | bc
}

echo "Snapshots, written to $WORK by rank 0 (mean of 5 unless said)"
"$BUILD/runtime/bench/snapshot_bench" "$WORK/sync" "$(mlp_mib 1024)" "$(mlp_mib 7168)" | tee "$WORK/sync.txt"
for spec in "1024 2048 12" "7168 256 3"; do
  read -r width samples epochs <<<"$spec"
  sync=$(grep -F " $(mlp_mib "$width") MiB" "$WORK/sync.txt" | sed -E 's/.*synchronous save +([0-9.]+) ms.*/\1/')
  blocked=$(snapshot_run "$width" "$samples" "$epochs")
  printf 'ddp-train MLP width %s (%s MiB), snapshot every epoch: training blocked %s ms per snapshot = %.2f%% of a synchronous save\n' \
    "$width" "$(mlp_mib "$width")" "$blocked" "$(echo "100 * $blocked / $sync" | bc -l)"
done
