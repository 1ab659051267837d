#!/usr/bin/env bash
# Snapshots move between the stacks: a snapshot that one stack's ddp-train wrote resumes on every other stack's
# ddp-train. The same TorchScript MLP with AdamW on the same .npy data for all, made once by this machine's PyTorch
# (Debian 12's, the oldest: a TorchScript file loads in a later LibTorch, not in an earlier one). An MLP: LibTorch
# 1.13, 2.6 and 2.14 compute its steps alike to the bit, while dropout draws its masks differently from the same
# generator state, which would hide what the snapshot carried behind what the versions compute. Each stack's
# OpenBLAS does the MLP's matrix products, and its versions pick different kernels for one CPU (on a Sapphire Rapids
# CPU, Debian 12's 0.3.21 does not know the model and takes its Prescott kernels, trixie's 0.3.29 Cooperlake's, and two
# epochs end 4.5e-08 apart): every stack runs Haswell's, where the CPU has AVX2, so that what differs is only what the
# snapshot carried.
# Each stack A, on 2 ranks, trains 5 epochs with a snapshot every epoch: its final model F_A and its snapshot after
# epoch 3, S_A. Then for each other stack B:
#   1. B resumes S_A with 3 epochs to run: nothing is left to train, so B's final model is what B restored, and
#      every tensor must be S_A's MODEL_STATE bit for bit;
#   2. B resumes S_A to epoch 5: optimizer state, sampler position and step count came along if B's final model is
#      F_A, bit for bit.
#   cross_stack.sh BUILD_HERE BUILD:RELEASE...    run by ./run.sh test after every stack's suite: BUILD_HERE is
#                                                 this machine's stack's build, each BUILD:RELEASE a stack in
#                                                 RELEASE's root
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
PYTHON=/usr/bin/python3
fail() { echo "cross_stack: FAIL: $*" >&2; exit 1; }

# ddp-train on 2 ranks over loopback, here: __ranks DDP_TRAIN PORT LOG ARGS...
if [ "${1:-}" = __ranks ]; then
  shift
  train=$1 port=$2 log=$3
  shift 3
  pids=() blas=()
  ! grep -qw avx2 /proc/cpuinfo || blas=(OPENBLAS_CORETYPE=Haswell)
  trap 'kill "${pids[@]}" 2>/dev/null || true; wait' EXIT
  for rank in 0 1; do
    env RANK=$rank LOCAL_RANK=$rank WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" \
      OMP_NUM_THREADS=1 USE_LIBUV=0 "${blas[@]}" "$train" "$@" >"$log.rank$rank" 2>&1 &
    pids+=($!)
  done
  status=0
  for pid in "${pids[@]}"; do wait "$pid" || status=1; done
  pids=()
  [ "$status" = 0 ] || { cat "$log.rank0" "$log.rank1" >&2; exit 1; }
  exit 0
fi

usage="usage: cross_stack.sh BUILD_HERE BUILD:RELEASE..."
BUILD_HERE=$(realpath "${1:?$usage}")
shift
[ $# -gt 0 ] || fail "no stack in a root; $usage"
# The stacks by name: "here", and each root's release. Their build directories; a root's release.
declare -A BUILD_OF=([here]=$BUILD_HERE)
STACK_NAMES=(here)
for stack in "$@"; do
  [[ $stack == *:* ]] || fail "'$stack': give BUILD:RELEASE; $usage"
  BUILD_OF[${stack##*:}]=$(realpath "${stack%:*}")
  STACK_NAMES+=("${stack##*:}")
done
WORK=$BUILD_HERE/cross-stack
rm -rf "$WORK"
mkdir -p "$WORK"

# ranks STACK LOG ARGS...: on this machine ("here") or in the root of release STACK, whose file system shows the
# repository (and so every build directory) at the same path. The port is reserved here, by the tests' shared
# helper (locked for this script's life, outside the kernel's ephemeral range).
ranks() {
  local stack=$1 port
  shift
  port=$("$BUILD_HERE/tests/common/ddp-test-port" $$) || fail "no free port"
  if [ "$stack" = here ]; then
    "$0" __ranks "$BUILD_HERE/runtime/ddp-train" "$port" "$@"
  else
    "$ROOT/tests/stacks/root.sh" run "$stack" --isolated -- "$0" __ranks "${BUILD_OF[$stack]}/runtime/ddp-train" "$port" "$@"
  fi
}

"$PYTHON" "$ROOT/tests/runtime/python/model_io.py" make-model mlp "$WORK/model.pt"
"$PYTHON" "$ROOT/tests/runtime/python/model_io.py" make-data mlp "$WORK/data" --npy --samples 128
TRAIN=(--model "$WORK/model.pt" --data "$WORK/data" --batch-size 8 --optimizer adamw --lr 0.01 --seed 5 --keep 9)

# compare FILE_1 FILE_2: the tensors of two state dicts (a snapshot's MODEL_STATE or a final model), bit for bit.
compare() {
  "$PYTHON" - "$@" <<'EOF'
import sys, torch
first, second = sys.argv[1:]
def state(path):
    value = torch.load(path, map_location="cpu")
    return value["MODEL_STATE"] if "MODEL_STATE" in value else value
a, b = state(first), state(second)
if list(a) != list(b):
    sys.exit(f"different tensors: {list(a)} against {list(b)}")
worst = max(float((a[k].double() - b[k].double()).abs().max()) if a[k].numel() else 0.0 for k in a)
exact = all(a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]) for k in a)
print(f"{len(a)} tensors, {'bit for bit' if exact else f'largest difference {worst:.3g}'}")
if not exact:
    sys.exit("not bit for bit")
EOF
}

# train STACK: 5 epochs with a snapshot each; F_STACK in $WORK/STACK/final.pt, S_STACK printed.
train() {
  local from=$1 dir=$WORK/$1 snapshot
  mkdir -p "$dir"
  ranks "$from" "$dir/whole.log" "${TRAIN[@]}" --snapshot-dir "$dir/snapshots" --output "$dir/final.pt" 5 1 ||
    fail "stack $from could not train"
  snapshot=$(find "$dir/snapshots" -name 'snapshot-e000003-*.pt' -print -quit)
  [ -n "$snapshot" ] || fail "stack $from wrote no snapshot after epoch 3: $(ls "$dir/snapshots")"
  echo "$snapshot"
}

direction() {
  local from=$1 to=$2 snapshot=$3 dir=$WORK/$1-to-$2 result
  mkdir -p "$dir"
  ranks "$to" "$dir/restored.log" "${TRAIN[@]}" --snapshot-dir "$dir/restored" --resume "$snapshot" \
    --output "$dir/restored-$to.pt" 3 1 || fail "stack $to could not resume stack $from's snapshot"
  grep -q "Resuming training from snapshot at Epoch 3 " "$dir/restored.log.rank0" ||
    fail "stack $to did not say it resumed: $(cat "$dir/restored.log.rank0")"
  result=$(compare "$snapshot" "$dir/restored-$to.pt" 2>&1) ||
    fail "stack $to's restored weights are not stack $from's snapshot: $result"
  echo "cross_stack: $from -> $to: restored weights: $result"
  ranks "$to" "$dir/resumed.log" "${TRAIN[@]}" --snapshot-dir "$dir/resumed" --resume "$snapshot" \
    --output "$dir/resumed-$to.pt" 5 1 || fail "stack $to could not continue stack $from's run"
  result=$(compare "$WORK/$from/final.pt" "$dir/resumed-$to.pt" 2>&1) ||
    fail "stack $to's continuation of stack $from's run is not $from's own: $result"
  echo "cross_stack: $from -> $to: continued to epoch 5, against $from's own run: $result"
}

declare -A SNAPSHOT_OF
for from in "${STACK_NAMES[@]}"; do SNAPSHOT_OF[$from]=$(train "$from"); done
for from in "${STACK_NAMES[@]}"; do
  for to in "${STACK_NAMES[@]}"; do
    [ "$from" = "$to" ] || direction "$from" "$to" "${SNAPSHOT_OF[$from]}"
  done
done
echo "cross_stack: PASS: snapshots resume among ${STACK_NAMES[*]}, every way"
