#!/usr/bin/env bash
# Side by side on this machine: all-reduce through the MPI group against the Gloo group (2 ranks, 84 B to 64 MB);
# ddp-train on Gloo (2 ranks over 127.0.0.1) and on the MPI group (mpirun -np 2) against the same training in
# Python DDP (Debian's python3-torch, Gloo), the seed workload and an MLP of width 1024; then the time an
# asynchronous snapshot blocks training against a synchronous save of the same state.
#   runtime/bench/run_bench.sh [BUILD_DIR]      (default: build; configures and builds what is missing)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$ROOT/build}
PYTHON=/usr/bin/python3  # Debian's, which has torch
SEED_EPOCHS=${SEED_EPOCHS:-40}
SEED_EPOCHS_MPI=${SEED_EPOCHS_MPI:-400}  # 20x faster: as many epochs would take 0.1 s
read -ra MPIRUN <<<"mpirun -np 2 --allow-run-as-root ${MPIRUN_OPTIONS:-}"  # e.g. MPIRUN_OPTIONS="--bind-to none"
MLP_EPOCHS=${MLP_EPOCHS:-4}
ROUNDS=${ROUNDS:-5}

[ -f "$BUILD/CMakeCache.txt" ] || cmake -S "$ROOT" -B "$BUILD" -G Ninja >/dev/null
cmake --build "$BUILD" -j 2 --target ddp-train snapshot_bench allreduce_bench >/dev/null
DDP_TRAIN=$BUILD/runtime/ddp-train
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# Two ranks with the variables srun --ddp exports; prints rank 0's samples/s.
two_ranks() {
  local port=$((20000 + RANDOM % 10000)) rank
  for rank in 0 1; do
    env RANK=$rank LOCAL_RANK=$rank WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port USE_LIBUV=0 \
        OMP_NUM_THREADS=1 "$@" >"$WORK/rank$rank.log" 2>&1 &
  done
  wait
  sed -n 's/^Trained .*: \([0-9]*\) samples\/s$/\1/p' "$WORK/rank0.log"
}

# ddp-train over the MPI group; prints rank 0's samples/s.
mpi_ranks() {
  OMP_NUM_THREADS=1 DDP_BACKEND=mpi "${MPIRUN[@]}" "$DDP_TRAIN" "$@" >"$WORK/mpirun.log" 2>&1
  sed -n 's/^Trained .*: \([0-9]*\) samples\/s$/\1/p' "$WORK/mpirun.log"
}

median() { sort -n | sed -n "$((($1 + 1) / 2))p"; }

# Alternating runs, median of each: on a shared 2-core machine single runs of a latency-bound loop vary by 30%.
compare() {  # name, epochs, epochs on MPI, workload arguments
  local name=$1 epochs=$2 mpi_epochs=$3 round gloo=() mpi=() python=()
  shift 3
  local train=("$@" --snapshot-dir "$WORK/snapshots-$name" --output "$WORK/final.pt")
  for ((round = 0; round < ROUNDS; round++)); do
    gloo+=("$(two_ranks "$DDP_TRAIN" "${train[@]}" "$epochs" 0)")
    mpi+=("$(mpi_ranks "${train[@]}" "$mpi_epochs" 0)")
    python+=("$(two_ranks "$PYTHON" "$ROOT/runtime/bench/python_ddp.py" "$@" "$epochs")")
  done
  local gloo_median mpi_median python_median
  gloo_median=$(printf '%s\n' "${gloo[@]}" | median "$ROUNDS")
  mpi_median=$(printf '%s\n' "${mpi[@]}" | median "$ROUNDS")
  python_median=$(printf '%s\n' "${python[@]}" | median "$ROUNDS")
  printf '%-18s | %9s | %9s | %10s | %6.2f | %6.2f   (runs: Gloo %s; MPI %s; Python %s)\n' "$name" "$gloo_median" \
    "$mpi_median" "$python_median" "$(echo "$gloo_median / $python_median" | bc -l)" \
    "$(echo "$mpi_median / $python_median" | bc -l)" "${gloo[*]}" "${mpi[*]}" "${python[*]}"
}

OMP_NUM_THREADS=1 "${MPIRUN[@]}" "$BUILD/runtime/bench/allreduce_bench"
echo
echo "DDP training, 2 ranks, batch 32 per rank, samples/s, median of $ROUNDS (this machine: $(nproc) cores)"
echo "ddp-train on Gloo (torchrun variables) and on the MPI group (${MPIRUN[*]}); Python DDP on Gloo"
printf '%-18s | %9s | %9s | %10s | %6s | %6s\n' workload "C++ Gloo" "C++ MPI" "Python DDP" "Gloo/Py" "MPI/Py"
compare "seed Linear(20,1)" "$SEED_EPOCHS" "$SEED_EPOCHS_MPI" --workload seed
compare "MLP width 1024" "$MLP_EPOCHS" "$MLP_EPOCHS" --workload mlp --width 1024
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
