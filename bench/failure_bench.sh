#!/usr/bin/env bash
# How fast a broken --ddp step ends, on the test cluster (2 nodes x 2 tasks):
# - a rank dies (SIGKILL) while the others would run for RUN_S more seconds: from its death to srun's exit, with
#   srun --ddp (the step ends when a task fails) and with --ddp-keep-going (what plain srun did: the others run on;
#   a DDP program's ranks would wait in their next collective until PyTorch's timeout, 30 minutes by default);
# - a rank of ddp-train is stopped (SIGSTOP, a hung process or node) after its first snapshot: from the stop to
#   srun's exit, with ddp-train --timeout TIMEOUT_S (goal: the timeout + at most 5 s).
# Needs root; brings a 2-node cluster up with the plugin of BUILD_DIR unless one is up, and tears down what it started.
#   bench/failure_bench.sh [BUILD_DIR] [RUNS (5)]
# Inside a Debian 13 root: tests/stacks/root.sh run trixie --isolated -- bench/failure_bench.sh build-debian13
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(realpath "${1:-$ROOT/build}")
RUNS=${2:-5}
RUN_S=${RUN_S:-30}
TIMEOUT_S=${TIMEOUT_S:-10}
CLUSTER=$ROOT/tests/cluster/cluster.sh
started=0 WORK=""
cleanup() {
  [ -z "$WORK" ] || rm -rf "$WORK"
  [ "$started" = 0 ] || "$CLUSTER" down >/dev/null
}
trap cleanup EXIT
if ! "$CLUSTER" env >/dev/null 2>&1; then
  "$CLUSTER" up --plugin "$BUILD/spank_plugin/ddp.so" >/dev/null
  started=1
fi
eval "$("$CLUSTER" env)"
WORK=$(mktemp -d "$DDP_CLUSTER_SHARED/failure_bench.XXXXXX")
chown "$DDP_CLUSTER_USER:" "$WORK"
install -m 0755 "$BUILD/runtime/ddp-train" "$ROOT/tests/cluster/kill_rank.sh" "$WORK/"

median() { printf '%s\n' "$@" | sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
now() { date +%s.%N; }
on_cluster() { "$CLUSTER" exec --cwd "$WORK" "$@"; }

# Rank 1 notes the time and kills itself 2 s in; the others sleep RUN_S seconds.
cat >"$WORK/die.sh" <<SCRIPT
#!/bin/sh
if [ "\$RANK" = 1 ]; then sleep 2; date +%s.%N >"$WORK/died"; kill -KILL \$\$; fi
sleep $RUN_S
SCRIPT
chmod 0755 "$WORK/die.sh"

death_to_end() {  # SRUN_OPTIONS...: seconds from rank 1's death to srun's exit
  local end
  rm -f "$WORK/died"
  on_cluster srun --ddp -N2 --ntasks-per-node=2 "$@" "$WORK/die.sh" >/dev/null 2>&1 || true
  end=$(now)
  awk -v a="$(cat "$WORK/died")" -v b="$end" 'BEGIN {printf "%.2f", b - a}'
}

stop_to_end() {  # seconds from the stop of rank 3 to srun's exit, ddp-train --timeout TIMEOUT_S
  local dir end
  dir=$(mktemp -d "$WORK/stop.XXXXXX")
  chown "$DDP_CLUSTER_USER:" "$dir"
  on_cluster env REAL_TRAIN="$WORK/ddp-train" KILL_RANK=3 KILL_SIGNAL=STOP KILL_WHEN="snapshot-*.pt" \
    KILL_LISTING="$dir/stopped" srun --ddp -N2 --ntasks-per-node=2 --ddp-snapshot-dir="$dir" "$WORK/kill_rank.sh" \
    --timeout "$TIMEOUT_S" --output "$dir/final.pt" 1000 1 >/dev/null 2>&1 || true
  end=$(now)
  awk -v a="$(date -r "$dir/stopped" +%s.%N)" -v b="$end" 'BEGIN {printf "%.2f", b - a}'
}

ddp=() keep=() stop=()
for ((i = 0; i < RUNS; i++)); do
  ddp+=("$(death_to_end)")
  keep+=("$(death_to_end --ddp-keep-going)")
  stop+=("$(stop_to_end)")
done
echo "failure_bench: $(on_cluster srun --version), $RUNS runs each, 2 nodes x 2 tasks"
echo "failure_bench: rank killed -> step ended, srun --ddp:              median $(median "${ddp[@]}") s  (runs: ${ddp[*]})"
echo "failure_bench: rank killed -> step ended, --ddp-keep-going:        median $(median "${keep[@]}") s  (others sleep $((RUN_S - 2)) s more)"
echo "failure_bench: ddp-train rank stopped -> step ended, --timeout $TIMEOUT_S: median $(median "${stop[@]}") s  (runs: ${stop[*]})"
