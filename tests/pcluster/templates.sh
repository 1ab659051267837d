#!/usr/bin/env bash
# The templates as a ParallelCluster user runs them, from the source tree the action put in /opt/slurm-ddp/source,
# with the ddp-train and ddp-restart it installed in /opt/slurm-ddp/bin: multi-node.sbatch on 2 nodes and the p4d
# template on 3 (the test partition, 2 tasks a node, on CPUs: DEVICE=cpu, --ddp=gloo). Both train to the end, write
# their snapshots (torch.load reads each) and the final model.
set -euo pipefail
# shellcheck source=../cluster/lib.sh
source "$(dirname "$0")/../cluster/lib.sh"
TEMPLATES=/opt/slurm-ddp/source/sbatch_templates
BIN=/opt/slurm-ddp/bin

submit_template() {  # TEMPLATE DIR [VAR=VALUE...] [-- SBATCH OPTION...]
  local template=$1 dir=$2 vars=()
  shift 2
  while [ $# -gt 0 ] && [ "$1" != -- ]; do vars+=("$1"); shift; done
  [ $# -eq 0 ] || shift
  install -d -o "$DDP_CLUSTER_USER" "$dir"
  submit DDP_TRAIN="$BIN/ddp-train" DDP_RESTART="$BIN/ddp-restart" SNAPSHOT_DIR="$dir/snapshots" DEVICE=cpu "${vars[@]}" \
    --chdir="$dir" "$@" "$TEMPLATES/$template"
}

snapshots_load() {  # DIR
  /usr/bin/python3 - "$1" <<'EOF' || fail "snapshots in $1 do not load"
import glob, os, sys, torch
paths = sorted(glob.glob(os.path.join(sys.argv[1], "snapshot-*.pt")))
assert paths, "no snapshot files"
for path in paths:
    snapshot = torch.load(path)
    assert "MODEL_STATE" in snapshot and "EPOCHS_RUN" in snapshot, path
EOF
}

multi=$(submit_template multi-node.sbatch "$TEST_DIR/multi-node" EPOCHS=3 SAVE_EVERY=1 -- --cpus-per-task=2)
p4d=$(submit_template parallelcluster/p4d-efa.sbatch "$TEST_DIR/p4d-efa" EPOCHS=3 SAVE_EVERY=1 TASKS_PER_NODE=2 \
  TRAIN_ARGS="--width 64" -- --partition=ddp --nodes=3 --ntasks-per-node=2 --cpus-per-task=2 --ddp=gloo)
for name in multi-node:$multi:2 p4d-efa:$p4d:6; do
  IFS=: read -r template job ranks <<<"$name"
  dir=$TEST_DIR/$template
  state=$(wait_job "$job" 300)
  out=$(cat "$dir"/*-"$job".out 2>/dev/null)
  [ "$state" = COMPLETED ] || fail "$template: job $job ended $state: $out"
  assert_contains "$out" "Final model saved at finalmodel.pt" "$template: the final model"
  assert_contains "$out" "Epoch 2 | Training snapshot saved at $dir/snapshots/snapshot-e000003-" "$template: snapshots"
  assert_eq "$ranks" "$(grep -c '^\[CPU[0-9]*\] Epoch 0 ' <<<"$out")" "$template: ranks that trained: $out"
  [ -f "$dir/finalmodel.pt" ] || fail "$template: no finalmodel.pt"
  snapshots_load "$dir/snapshots"
done
pass "multi-node.sbatch (2 ranks on 2 nodes) and p4d-efa.sbatch (6 ranks on 3 nodes) trained to the end with the installed ddp-train"
