#!/usr/bin/env bash
# Side by side on this machine: all-reduce through the MPI group against the Gloo group (2 ranks, 84 B to 64 MB);
# ddp-train on Gloo (2 ranks over 127.0.0.1) and on the MPI group (mpirun -np 2) against the same training in
# Python DDP (Debian's python3-torch, Gloo), the seed workload and an MLP of width 1024; then the time an
# asynchronous snapshot blocks training against a synchronous save of the same state.
#   runtime/bench/run_bench.sh [BUILD_DIR]      (default: build; configures and builds what is missing)
# With --model, instead: ddp-train --model against Python DDP on the same TorchScript files (a scripted MLP and a
# small CNN saved by python_ddp.py) and the same .npy data, on Gloo and on MPI; ddp-train's 2-rank scaling
# efficiency; and each rank's memory while 2 ranks train on a memory-mapped .npy data set as large as the memory
# available (twice each rank's share of the page cache).
#   runtime/bench/run_bench.sh --model [BUILD_DIR]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
MODEL_MODE=false
if [ "${1:-}" = --model ]; then
  MODEL_MODE=true
  shift
fi
BUILD=${1:-$ROOT/build}
PYTHON=/usr/bin/python3  # Debian's, which has torch
SEED_EPOCHS=${SEED_EPOCHS:-40}
SEED_EPOCHS_MPI=${SEED_EPOCHS_MPI:-400}  # 20x faster: as many epochs would take 0.1 s
read -ra MPIRUN <<<"mpirun -np 2 --allow-run-as-root ${MPIRUN_OPTIONS:-}"  # e.g. MPIRUN_OPTIONS="--bind-to none"
MLP_EPOCHS=${MLP_EPOCHS:-4}
ROUNDS=${ROUNDS:-5}
MODEL_SAMPLES=${MODEL_SAMPLES:-2048}     # [1, 28, 28] images in the --model runs' data set
MODEL_EPOCHS=${MODEL_EPOCHS:-2}
SCALING_BATCHES=${SCALING_BATCHES:-32 128 512}  # per rank, in the scaling table
SCALING_STEPS=${SCALING_STEPS:-16}             # steps an epoch at every batch size
MEMORY_SECONDS=${MEMORY_SECONDS:-30}     # training time before each rank's memory is read

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

# One process, world size 1, with the same variables; prints its samples/s.
one_process() {
  env RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$((20000 + RANDOM % 10000)) \
      USE_LIBUV=0 OMP_NUM_THREADS=1 "$@" >"$WORK/single.log" 2>&1
  sed -n 's/^Trained .*: \([0-9]*\) samples\/s$/\1/p' "$WORK/single.log"
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

# Weak scaling by batch size per rank: 2 ranks' samples/s against twice one process's (1 thread each), for
# ddp-train on Gloo and on MPI and for Python DDP on Gloo, each on a data set of BATCH x 2 ranks x SCALING_STEPS
# samples, so that every batch size runs as many steps. Gradients are all-reduced once per step whatever the batch,
# so a larger batch gives the same all-reduce more computing to hide behind.
efficiency() { echo "scale=1; 100 * $1 / (2 * $2)" | bc; }
scaling_by_batch() {  # name, model file
  local name=$1 model=$2 batch round
  for batch in $SCALING_BATCHES; do
    local data=$WORK/images-$batch one=() gloo=() mpi=() py_one=() py_two=()
    [ -d "$data" ] || "$PYTHON" "$ROOT/runtime/bench/python_ddp.py" --save-data "$data" \
      --samples $((batch * 2 * SCALING_STEPS))
    local train=(--model "$model" --data "$data" --batch-size "$batch" --snapshot-dir "$WORK/snapshots-scaling"
      --output "$WORK/final.pt" "$MODEL_EPOCHS" 0)
    local python=("$PYTHON" "$ROOT/runtime/bench/python_ddp.py" --model "$model" --data "$data" --batch-size "$batch"
      "$MODEL_EPOCHS")
    for ((round = 0; round < ROUNDS; round++)); do
      one+=("$(one_process "$DDP_TRAIN" "${train[@]}")")
      gloo+=("$(two_ranks "$DDP_TRAIN" "${train[@]}")")
      mpi+=("$(mpi_ranks "${train[@]}")")
      py_one+=("$(one_process "${python[@]}")")
      py_two+=("$(two_ranks "${python[@]}")")
    done
    local m_one m_gloo m_mpi m_py_one m_py_two
    m_one=$(printf '%s\n' "${one[@]}" | median "$ROUNDS") m_gloo=$(printf '%s\n' "${gloo[@]}" | median "$ROUNDS")
    m_mpi=$(printf '%s\n' "${mpi[@]}" | median "$ROUNDS") m_py_one=$(printf '%s\n' "${py_one[@]}" | median "$ROUNDS")
    m_py_two=$(printf '%s\n' "${py_two[@]}" | median "$ROUNDS")
    printf '%-18s | %5s | %6s | %6s | %8s%% | %6s | %8s%% | %6s | %6s | %8s%%\n' "$name" "$batch" "$m_one" \
      "$m_gloo" "$(efficiency "$m_gloo" "$m_one")" "$m_mpi" "$(efficiency "$m_mpi" "$m_one")" "$m_py_one" \
      "$m_py_two" "$(efficiency "$m_py_two" "$m_py_one")"
  done
}

# Each rank's memory after MEMORY_SECONDS of training on a memory-mapped data set as large as MemAvailable: the
# page cache's share of each of the 2 ranks is at most half of it, so the data set is twice that share. The file is
# sparse (its samples are zeros; the figure is about memory, not learning): written in no time, no disk used, and
# its pages enter the page cache only as batches read them, as a data set on a shared file system would.
memory_figures() {
  local available_kb samples data=$WORK/huge rank pid
  available_kb=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo)
  samples=$((available_kb * 1024 / (28 * 28 * 4)))
  "$PYTHON" -c "
import numpy, sys, os
os.makedirs(sys.argv[1])
numpy.lib.format.open_memmap(sys.argv[1] + '/x.npy', 'w+', '<f4', (int(sys.argv[2]), 1, 28, 28))
numpy.lib.format.open_memmap(sys.argv[1] + '/y.npy', 'w+', '<i8', (int(sys.argv[2]),))" "$data" "$samples"
  local port=$((20000 + RANDOM % 10000)) pids=()
  for rank in 0 1; do
    env RANK=$rank LOCAL_RANK=$rank WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port USE_LIBUV=0 \
      OMP_NUM_THREADS=1 "$DDP_TRAIN" --model "$WORK/mlp.pt" --data "$data" --snapshot-dir "$WORK/snapshots-huge" \
      --output "$WORK/final.pt" 1 0 >"$WORK/huge$rank.log" 2>&1 &
    pids+=($!)
  done
  sleep "$MEMORY_SECONDS"
  echo "Memory per rank, 2 ranks on Gloo, scripted MLP, batch 32, ${MEMORY_SECONDS} s after the start: a memory-mapped"
  echo "x.npy of $samples samples [1, 28, 28] float32, $(echo "scale=1; $samples * 3136 / 1073741824" | bc) GiB, with" \
    "$(echo "scale=1; $available_kb / 1048576" | bc) GiB of memory available"
  printf '%-4s | %9s | %7s | %7s | %11s | %9s | %16s\n' rank "VmHWM MiB" "Rss MiB" "Pss MiB" "Private MiB" \
    "Anon MiB" "x.npy in Rss MiB"
  for rank in 0 1; do
    pid=${pids[$rank]}
    grep -q '^Rss:' "/proc/$pid/smaps_rollup" 2>/dev/null || { cat "$WORK/huge$rank.log"; exit 1; }
    awk -v rank="$rank" -v file="$data/x.npy" '
      FILENAME ~ /status$/ && /^VmHWM:/ {hwm = $2}
      FILENAME ~ /rollup$/ && $1 ~ /^(Rss|Pss|Private_Clean|Private_Dirty|Anonymous):$/ {total[$1] = $2}
      FILENAME ~ /smaps$/ && /^[0-9a-f]+-[0-9a-f]+ / {in_file = ($NF == file)}
      FILENAME ~ /smaps$/ && in_file && /^Rss:/ {mapped += $2}
      END {printf "%-4s | %9d | %7d | %7d | %11d | %9d | %16d\n", rank, hwm / 1024, total["Rss:"] / 1024,
             total["Pss:"] / 1024, (total["Private_Clean:"] + total["Private_Dirty:"]) / 1024,
             total["Anonymous:"] / 1024, mapped / 1024}' \
      "/proc/$pid/status" "/proc/$pid/smaps_rollup" "/proc/$pid/smaps"
  done
  kill "${pids[@]}"
  wait "${pids[@]}" 2>/dev/null || true
}

if $MODEL_MODE; then
  "$PYTHON" "$ROOT/runtime/bench/python_ddp.py" --save-model mlp "$WORK/mlp.pt"
  "$PYTHON" "$ROOT/runtime/bench/python_ddp.py" --save-model cnn "$WORK/cnn.pt"
  "$PYTHON" "$ROOT/runtime/bench/python_ddp.py" --save-data "$WORK/images" --samples "$MODEL_SAMPLES"
  echo "ddp-train --model against Python DDP: the same TorchScript file and .npy data ($MODEL_SAMPLES images"
  echo "[1, 28, 28], 10 classes), SGD, batch 32 per rank, 2 ranks, samples/s, median of $ROUNDS (this machine: $(nproc) cores)"
  echo "ddp-train on Gloo (torchrun variables) and on the MPI group (${MPIRUN[*]}); Python DDP on Gloo"
  printf '%-18s | %9s | %9s | %10s | %6s | %6s\n' model "C++ Gloo" "C++ MPI" "Python DDP" "Gloo/Py" "MPI/Py"
  compare "MLP 784-1024-1024" "$MODEL_EPOCHS" "$MODEL_EPOCHS" --model "$WORK/mlp.pt" --data "$WORK/images"
  compare "CNN 16-32 conv" "$MODEL_EPOCHS" "$MODEL_EPOCHS" --model "$WORK/cnn.pt" --data "$WORK/images"
  echo
  echo "2-rank scaling efficiency: 2 ranks' samples/s against twice one process's (1 thread each), by batch per"
  echo "rank, $SCALING_STEPS steps an epoch; ddp-train --model on Gloo and MPI, Python DDP on Gloo; median of $ROUNDS"
  printf '%-18s | %5s | %6s | %6s | %9s | %6s | %9s | %6s | %6s | %9s\n' model batch "C++ 1" "Gloo 2" efficiency \
    "MPI 2" efficiency "Py 1" "Py 2" efficiency
  scaling_by_batch "MLP 784-1024-1024" "$WORK/mlp.pt"
  scaling_by_batch "CNN 16-32 conv" "$WORK/cnn.pt"
  echo
  memory_figures
  exit 0
fi

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
