# Helpers for the tests that run the sbatch templates with ddp-train on the test cluster. Source after lib.sh:
#
#   job=$(submit_template multi-node.sbatch "$TEST_DIR/run" EPOCHS=4 -- --cpus-per-task=1)
#   assert_eq COMPLETED "$(wait_job "$job")" "state"
#   assert_same_models "$TEST_DIR/base/finalmodel.pt" "$TEST_DIR/run/finalmodel.pt"
#
# The test cluster's nodes have 2 GPUs each as Slurm sees them (device files only, see cluster.sh): templates are
# submitted with a GPU request as users submit them, --gpus-per-node=1 unless the caller gives one, and with
# ddp-train and ddp-restart from this build, staged where the job user reads them.
# shellcheck shell=bash

[ -n "$DDP_PLUGIN" ] || skip "the plugin is not built"
[ -x "${DDP_BUILD_DIR:-}/runtime/ddp-train" ] || skip "ddp-train is not built (LibTorch not found)"
TORCH_PYTHON=/usr/bin/python3  # Debian's, which has torch
"$TORCH_PYTHON" -c 'import torch' 2>/dev/null || skip "Debian's python3-torch is not installed"
TEMPLATES=$DDP_SOURCE_DIR/sbatch_templates
STAGED_TRAIN=$(stage "$DDP_BUILD_DIR/runtime/ddp-train")
STAGED_RESTART=$(stage "$TEMPLATES/ddp-restart")
stage "$DDP_BUILD_DIR/src/ddp-why" >/dev/null  # beside ddp-restart, which finds it there

# submit_template TEMPLATE DIR [VAR=VALUE...] [-- SBATCH OPTION...]: submits TEMPLATE (a path relative to
# sbatch_templates/) with DIR as its working directory, where its output (%x-%j.out) and finalmodel.pt land, and
# snapshots in DIR/snapshots. Prints the job id.
submit_template() {
  local template=$1 dir=$2 vars=()
  shift 2
  while [ $# -gt 0 ] && [ "$1" != -- ]; do vars+=("$1"); shift; done
  [ $# -eq 0 ] || shift
  install -d -o "$DDP_CLUSTER_USER" "$dir"
  local gpus=(--gpus-per-node=1)
  case " $* " in *" --gres=gpu"* | *" --gpus"*) gpus=() ;; esac
  submit DDP_TRAIN="$STAGED_TRAIN" DDP_RESTART="$STAGED_RESTART" SNAPSHOT_DIR="$dir/snapshots" "${vars[@]}" \
    --chdir="$dir" "${gpus[@]}" "$@" "$TEMPLATES/$template"
}

# job_output DIR JOBID: the job's output file (the templates write %x-%j.out into their working directory).
job_output() { cat "$1"/*-"$2".out 2>/dev/null; }

# await_job_output DIR JOBID PATTERN SECONDS WHAT: waits until a line of the job's output matches PATTERN (grep's basic
# regular expression); after SECONDS fails saying that WHAT did not happen, with the output.
await_job_output() {
  local dir=$1 job=$2 pattern=$3 seconds=$4 what=$5 end=$((SECONDS + $4))
  until job_output "$dir" "$job" | grep -q -- "$pattern"; do
    [ "$SECONDS" -lt "$end" ] || fail "job $job: $what within $seconds s: $(job_output "$dir" "$job")"
    sleep 0.1
  done
}

# ddp_train_pids [!]NAME=VALUE...: the job user's ddp-train processes, oldest first (every node's processes are this
# machine's), whose environment holds each NAME=VALUE given and no !NAME=VALUE. Each environment is read whole before
# it is searched: in `tr | grep -q` under pipefail, grep's early exit can fail tr, and a process is missed.
ddp_train_pids() {
  local pid environ entry
  for pid in $("$CLUSTER_SH" pgrep -u "$DDP_CLUSTER_USER" -x ddp-train | sort -n); do
    environ=$(tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null) || continue
    for entry; do
      case $entry in
        !*) grep -qFx -- "${entry#!}" <<<"$environ" && continue 2 ;;
        *) grep -qFx -- "$entry" <<<"$environ" || continue 2 ;;
      esac
    done
    echo "$pid"
  done
  return 0
}

# job_pids JOBID: every ddp-train of the job, of every step.
job_pids() { ddp_train_pids "SLURM_JOB_ID=$1"; }

# expect_completed DIR JOBID [SECONDS]: the job ends COMPLETED, else the test fails with its output.
expect_completed() {
  local state
  state=$(wait_job "$2" "${3:-180}")
  [ "$state" = COMPLETED ] || fail "job $2 ended $state; its output: $(job_output "$1" "$2")"
}

# assert_same_models A B [close]: two state dicts that torch.load reads, with the same keys and bitwise equal
# tensors; with `close`, equal within float tolerance (runs whose all-reduces add in another order).
assert_same_models() {
  local why
  why=$("$TORCH_PYTHON" - "$1" "$2" "${3:-equal}" 2>&1 <<'EOF'
import sys, torch
a, b = (torch.load(path) for path in sys.argv[1:3])
same = torch.equal if sys.argv[3] == "equal" else lambda x, y: torch.allclose(x, y, rtol=1e-5, atol=1e-7)
if a.keys() != b.keys():
    sys.exit(f"keys differ: {sorted(a)} vs {sorted(b)}")
for key in a:
    if not same(a[key], b[key]):
        sys.exit(f"{key} differs: largest difference {(a[key] - b[key]).abs().max().item()}")
EOF
  ) || fail "the models $1 and $2 differ: $why"
}

# assert_snapshots_load DIR: every snapshot file in DIR loads with torch.load and holds MODEL_STATE and EPOCHS_RUN.
assert_snapshots_load() {
  local why
  why=$("$TORCH_PYTHON" - "$1" 2>&1 <<'EOF'
import glob, os, sys, torch
paths = sorted(glob.glob(os.path.join(sys.argv[1], "snapshot-*.pt")))
if not paths:
    sys.exit("no snapshot files")
for path in paths:
    snapshot = torch.load(path)
    if "MODEL_STATE" not in snapshot or "EPOCHS_RUN" not in snapshot:
        sys.exit(f"{path} lacks MODEL_STATE or EPOCHS_RUN: {sorted(snapshot)}")
EOF
  ) || fail "snapshots in $1: $why"
}
