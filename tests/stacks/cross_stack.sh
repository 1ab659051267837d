#!/usr/bin/env bash
# Snapshots move between the stacks (issue 11): a snapshot that one stack's ddp-train wrote resumes on the other
# stack's ddp-train, both ways. The same TorchScript MLP with AdamW on the same .npy data for both, made once by
# Debian 12's PyTorch (a TorchScript file loads in a later LibTorch, not in an earlier one). An MLP: LibTorch 1.13
# and 2.6 compute its steps alike to the bit, while dropout draws its masks differently from the same generator
# state, which would hide what the snapshot carried behind what the versions compute.
# For each direction A -> B, on 2 ranks:
#   1. A trains 5 epochs with a snapshot every epoch: its final model F_A and its snapshot after epoch 3, S_A;
#   2. B resumes S_A with 3 epochs to run: nothing is left to train, so B's final model is what B restored, and
#      every tensor must be S_A's MODEL_STATE bit for bit;
#   3. B resumes S_A to epoch 5: optimizer state, sampler position and step count came along if B's final model is
#      F_A, bit for bit.
#   cross_stack.sh BUILD_A BUILD_B RELEASE_B      run by ./run.sh test after both stacks' suites; A is this
#                                                 machine's stack (BUILD_A), B the one in RELEASE_B's root
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
  pids=()
  trap 'kill "${pids[@]}" 2>/dev/null || true; wait' EXIT
  for rank in 0 1; do
    env RANK=$rank LOCAL_RANK=$rank WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" \
      OMP_NUM_THREADS=1 USE_LIBUV=0 "$train" "$@" >"$log.rank$rank" 2>&1 &
    pids+=($!)
  done
  status=0
  for pid in "${pids[@]}"; do wait "$pid" || status=1; done
  pids=()
  [ "$status" = 0 ] || { cat "$log.rank0" "$log.rank1" >&2; exit 1; }
  exit 0
fi

BUILD_A=$(realpath "${1:?usage: cross_stack.sh BUILD_A BUILD_B RELEASE_B}")
BUILD_B=$(realpath "${2:?usage: cross_stack.sh BUILD_A BUILD_B RELEASE_B}")
RELEASE_B=${3:?usage: cross_stack.sh BUILD_A BUILD_B RELEASE_B}
WORK=$BUILD_A/cross-stack
rm -rf "$WORK"
mkdir -p "$WORK"

# ranks STACK LOG ARGS...: on this machine (a) or in B's root (b), whose file system shows the repository (and so
# both build directories) at the same path. The port is reserved here, by the tests' shared helper (locked for
# this script's life, outside the kernel's ephemeral range).
ranks() {
  local stack=$1 port
  shift
  port=$("$BUILD_A/tests/common/ddp-test-port" $$) || fail "no free port"
  if [ "$stack" = a ]; then
    "$0" __ranks "$BUILD_A/runtime/ddp-train" "$port" "$@"
  else
    "$ROOT/tests/stacks/root.sh" run "$RELEASE_B" --isolated -- "$0" __ranks "$BUILD_B/runtime/ddp-train" "$port" "$@"
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

direction() {
  local from=$1 to=$2 dir=$WORK/$1-to-$2 snapshot result
  mkdir -p "$dir"
  ranks "$from" "$dir/whole.log" "${TRAIN[@]}" --snapshot-dir "$dir/snapshots" --output "$dir/final-$from.pt" 5 1 ||
    fail "stack $from could not train"
  snapshot=$(find "$dir/snapshots" -name 'snapshot-e000003-*.pt' -print -quit)
  [ -n "$snapshot" ] || fail "stack $from wrote no snapshot after epoch 3: $(ls "$dir/snapshots")"
  ranks "$to" "$dir/restored.log" "${TRAIN[@]}" --snapshot-dir "$dir/restored" --resume "$snapshot" \
    --output "$dir/restored-$to.pt" 3 1 || fail "stack $to could not resume stack $from's snapshot"
  grep -q "Resuming training from snapshot at Epoch 3 " "$dir/restored.log.rank0" ||
    fail "stack $to did not say it resumed: $(cat "$dir/restored.log.rank0")"
  result=$(compare "$snapshot" "$dir/restored-$to.pt" 2>&1) ||
    fail "stack $to's restored weights are not stack $from's snapshot: $result"
  echo "cross_stack: $from -> $to: restored weights: $result"
  ranks "$to" "$dir/resumed.log" "${TRAIN[@]}" --snapshot-dir "$dir/resumed" --resume "$snapshot" \
    --output "$dir/resumed-$to.pt" 5 1 || fail "stack $to could not continue stack $from's run"
  result=$(compare "$dir/final-$from.pt" "$dir/resumed-$to.pt" 2>&1) ||
    fail "stack $to's continuation of stack $from's run is not $from's own: $result"
  echo "cross_stack: $from -> $to: continued to epoch 5, against $from's own run: $result"
}

direction a b
direction b a
echo "cross_stack: PASS: snapshots resume across the stacks both ways"
