#!/usr/bin/env bash
# How reliably ddp-train names a slow rank at a given --straggler-threshold (default 20%, ddp-train's own default).
# Each of RUNS rounds trains RANKS ranks on 127.0.0.1 three times: with the last rank under a CPU quota (QUOTA_PCT
# of a CPU over 10 ms periods, a cgroup of its own: a throttled CPU, which slows the rank's computing), with the last
# rank stopped STOP_MS of every STOP_MS + RUN_MS milliseconds of wall-clock time (SIGSTOP and SIGCONT, as
# tests/runtime/resilience_test.cpp's Stragglers test does), and without any slowdown. Counts, per epoch, whether
# the slowed rank was named and whether any other rank was; prints the highest score of a rank that kept pace, the
# margin that decides how low the threshold can go here.
# As srun --ddp binds each task to cores of its own, each rank is bound to one core (taskset), one rank per core by
# default: with more ranks than cores (RANKS=4 on 2 cores), a rank that shares its core with a busier one is slower
# by the host's clock, a real straggler of that machine, named as such. The quota needs root and a cgroup file
# system with the cpu controller (v2 or v1); without them that kind is left out.
#   [RANKS=N] bench/straggler_bench.sh [BUILD_DIR] [RUNS (5)] [THRESHOLD % (20)] [EPOCHS (3)]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(realpath "${1:-$ROOT/build}")
RUNS=${2:-5}
THRESHOLD=${3:-20}
EPOCHS=${4:-3}
STOP_MS=${STOP_MS:-60}
RUN_MS=${RUN_MS:-5}
QUOTA_PCT=${QUOTA_PCT:-25}
CORES=$(nproc)
RANKS=${RANKS:-$CORES}
SLOW=$((RANKS - 1))
TRAIN=$BUILD/runtime/ddp-train
[ -x "$TRAIN" ] || { echo "straggler_bench: $TRAIN is not built" >&2; exit 2; }
WORK=$(mktemp -d)
pids=()
# A cgroup of this run's own for the quota: cgroup v2's cpu.max, or v1's cfs_quota_us.
QUOTA_GROUP=""
if [ -w /sys/fs/cgroup/cgroup.subtree_control ] && grep -qw cpu /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
  QUOTA_GROUP=/sys/fs/cgroup/ddp-straggler-bench-$$
  mkdir "$QUOTA_GROUP" && echo "$((QUOTA_PCT * 100)) 10000" >"$QUOTA_GROUP/cpu.max"
elif [ -w /sys/fs/cgroup/cpu/cpu.cfs_quota_us ]; then
  QUOTA_GROUP=/sys/fs/cgroup/cpu/ddp-straggler-bench-$$
  mkdir "$QUOTA_GROUP" && echo 10000 >"$QUOTA_GROUP/cpu.cfs_period_us"
  echo "$((QUOTA_PCT * 100))" >"$QUOTA_GROUP/cpu.cfs_quota_us"
fi
cleanup() {
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  [ -z "$QUOTA_GROUP" ] || rmdir "$QUOTA_GROUP"
  rm -rf "$WORK"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# run_ranks DIR SLOWDOWN(quota|stop|none): one run of ddp-train; rank 0's output in DIR/rank0.log.
run_ranks() {
  local dir=$1 slowdown=$2 port rank
  mkdir -p "$dir"
  port=$(free_port)
  pids=()
  for ((rank = 0; rank < RANKS; rank++)); do
    taskset -c $((rank % CORES)) env MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" WORLD_SIZE="$RANKS" \
      LOCAL_WORLD_SIZE="$RANKS" RANK=$rank LOCAL_RANK=$rank "$TRAIN" --snapshot-dir "$dir" --output "$dir/final.pt" \
      --workload mlp --width 512 --samples 4096 --json --straggler-threshold "$THRESHOLD" "$EPOCHS" 0 \
      >"$dir/rank$rank.log" 2>&1 &
    pids+=($!)
  done
  [ "$slowdown" != quota ] || echo "${pids[$SLOW]}" >"$QUOTA_GROUP/cgroup.procs"
  if [ "$slowdown" = stop ]; then
    local stop_s run_s
    stop_s=$(awk -v ms="$STOP_MS" 'BEGIN {print ms / 1000}')
    run_s=$(awk -v ms="$RUN_MS" 'BEGIN {print ms / 1000}')
    while kill -STOP "${pids[$SLOW]}" 2>/dev/null; do
      sleep "$stop_s"
      kill -CONT "${pids[$SLOW]}" 2>/dev/null || break
      sleep "$run_s"
    done
  fi
  for rank in "${!pids[@]}"; do
    wait "${pids[$rank]}" || { echo "straggler_bench: rank $rank failed: $(tail -n 5 "$dir/rank$rank.log")" >&2; exit 1; }
  done
  pids=()
}

# tally LOG: one line per epoch from rank 0's JSON lines: "SLOW_NAMED OTHERS_NAMED HIGHEST_OTHER_SCORE SLOW_SCORE".
tally() {
  python3 - "$1" "$SLOW" <<'PY'
import json, sys
slow = int(sys.argv[2])
for line in open(sys.argv[1]):
    start = line.find('{"event": "stragglers"')
    if start < 0:
        continue
    epoch = json.loads(line[start:])
    named = set(epoch["stragglers"])
    scores = {r["rank"]: r["score"] for r in epoch["ranks"]}
    others = max(score for rank, score in scores.items() if rank != slow)
    print(int(slow in named), len(named - {slow}), others, scores[slow])
PY
}

higher() { awk -v a="$1" -v b="$2" 'BEGIN {print (a == "" || b > a) ? b : a}'; }
lower() { awk -v a="$1" -v b="$2" 'BEGIN {print (a == "" || b < a) ? b : a}'; }

declare -A epochs named falsely lowest
slowdowns=(stop)
[ -z "$QUOTA_GROUP" ] || slowdowns=(quota stop)
clean_epochs=0 false_clean=0 highest=""
for ((i = 0; i < RUNS; i++)); do
  for slowdown in "${slowdowns[@]}"; do
    run_ranks "$WORK/$slowdown$i" "$slowdown"
    while read -r slow_named others score slow_score; do
      epochs[$slowdown]=$((${epochs[$slowdown]:-0} + 1)) named[$slowdown]=$((${named[$slowdown]:-0} + slow_named))
      falsely[$slowdown]=$((${falsely[$slowdown]:-0} + (others > 0)))
      highest=$(higher "$highest" "$score") lowest[$slowdown]=$(lower "${lowest[$slowdown]:-}" "$slow_score")
    done < <(tally "$WORK/$slowdown$i/rank0.log")
  done
  run_ranks "$WORK/clean$i" none
  while read -r slow_named others score slow_score; do
    clean_epochs=$((clean_epochs + 1)) false_clean=$((false_clean + (others + slow_named > 0)))
    highest=$(higher "$highest" "$(higher "$score" "$slow_score")")
  done < <(tally "$WORK/clean$i/rank0.log")
done
report() {  # slowdown, its description
  echo "straggler_bench: rank $SLOW $2: named in ${named[$1]} of ${epochs[$1]} epochs (lowest score ${lowest[$1]}x);" \
    "another rank named in ${falsely[$1]} of ${epochs[$1]} epochs"
}
echo "straggler_bench: $RANKS ranks of ddp-train (mlp, width 512) on $CORES cores, each bound to one," \
  "threshold $THRESHOLD%, $RUNS runs x $EPOCHS epochs of each kind"
if [ -n "$QUOTA_GROUP" ]; then
  report quota "under a CPU quota of $QUOTA_PCT% (cgroup, 10 ms periods)"
else
  echo "straggler_bench: no CPU quota: needs root and a cgroup file system with the cpu controller"
fi
report stop "stopped ${STOP_MS} ms of every $((STOP_MS + RUN_MS)) ms"
echo "straggler_bench: no slowdown: a rank named in $false_clean of $clean_epochs epochs"
echo "straggler_bench: highest score of a rank that kept pace: ${highest}x (a threshold below" \
  "$(awk -v s="$highest" 'BEGIN {printf "%.0f", (s - 1) * 100}')% would have named it)"
