#!/usr/bin/env bash
# The one-command demo (`./run.sh`, after it has installed and built): brings up the local two-node Slurm of
# cluster.sh, submits sbatch_templates/multi-node.sbatch running ddp-train with snapshots on the cluster's shared
# directory, shows the job's output as it runs, copies the output, snapshots and final model to BUILD_DIR/demo,
# and tears the cluster down (also on failure or Ctrl-C).
#   tests/cluster/demo.sh BUILD_DIR        EPOCHS, SAVE_EVERY, WORKLOAD override the demo's training
set -euo pipefail
BUILD=$(cd "${1:?usage: demo.sh BUILD_DIR}" && pwd)
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CLUSTER_SH=$ROOT/tests/cluster/cluster.sh
EPOCHS=${EPOCHS:-30}
SAVE_EVERY=${SAVE_EVERY:-10}
WORKLOAD=${WORKLOAD:-mlp}
RESULTS=$BUILD/demo

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
[ "$(id -u)" -eq 0 ] || { echo "demo.sh: needs root (the test cluster runs slurmd in network namespaces)" >&2; exit 1; }
for built in spank_plugin/ddp.so runtime/ddp-train; do
  [ -e "$BUILD/$built" ] || { echo "demo.sh: $BUILD/$built is missing; run ./run.sh setup first" >&2; exit 1; }
done

say "Starting a two-node Slurm (munged, slurmctld, slurmd on node1 and node2) with the ddp plugin"
"$CLUSTER_SH" up --plugin "$BUILD/spank_plugin/ddp.so"
trap 'say "Tearing the cluster down"; "$CLUSTER_SH" down' EXIT
eval "$("$CLUSTER_SH" env)"
"$CLUSTER_SH" status

work=$DDP_CLUSTER_SHARED/demo
install -d -o "$DDP_CLUSTER_USER" "$work"
install -m 0755 "$BUILD/runtime/ddp-train" "$ROOT/sbatch_templates/ddp-restart" \
  "$ROOT/sbatch_templates/multi-node.sbatch" "$work/"

say "sbatch multi-node.sbatch: 2 nodes x 1 task, ddp-train --workload $WORKLOAD, $EPOCHS epochs, a snapshot every $SAVE_EVERY"
# The nodes have GPUs only as Slurm sees them (device files, see cluster.sh): the job asks for one per node as on a
# GPU cluster, and trains on the CPUs. --ddp-verbose reaches every srun of the job, so each task prints the plan the
# plugin made for it.
job=$("$CLUSTER_SH" exec --cwd "$work" env DDP_TRAIN="$work/ddp-train" DDP_RESTART="$work/ddp-restart" \
  EPOCHS="$EPOCHS" SAVE_EVERY="$SAVE_EVERY" WORKLOAD="$WORKLOAD" SNAPSHOT_DIR="$work/snapshots/%x-%j" \
  sbatch --parsable --gpus-per-node=1 --cpus-per-task=1 --ddp-verbose multi-node.sbatch)
echo "submitted job $job"

output=$work/ddp-multi-node-$job.out
state=""
tail -s 0.2 -n +1 -F "$output" 2>/dev/null &
follower=$!
while :; do
  state=$("$CLUSTER_SH" exec scontrol show job -o "$job" | grep -o 'JobState=[A-Z_]*' || true)
  state=${state#JobState=}
  case $state in PENDING | CONFIGURING | RUNNING | COMPLETING | REQUEUED | "") sleep 0.5 ;; *) break ;; esac
done
sleep 1
kill "$follower" 2>/dev/null || true

rm -rf "$RESULTS"
mkdir -p "$RESULTS"
cp -r "$output" "$work/snapshots" "$RESULTS/" 2>/dev/null || true
[ -f "$work/finalmodel.pt" ] && cp "$work/finalmodel.pt" "$RESULTS/"
say "Job $job: $state. Output, snapshots and final model copied to $RESULTS:"
(cd "$RESULTS" && find . -type f | sort)
[ "$state" = COMPLETED ]
