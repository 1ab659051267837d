#!/usr/bin/env bash
# How reliably ddp-train names a slow rank at a given --straggler-threshold (default 20%, ddp-train's own default),
# by its compute per step and by its arrival at the all-reduce (straggler.hpp).
# Each of RUNS rounds trains RANKS ranks on 127.0.0.1 three times: with the last rank under a CPU quota (QUOTA_PCT
# of a CPU over QUOTA_PERIOD_MS periods (10), a cgroup of its own: a throttled CPU), with the last rank stopped
# STOP_MS of every STOP_MS + RUN_MS milliseconds of wall-clock time (SIGSTOP and SIGCONT, as
# tests/runtime/resilience_test.cpp's tests do), and without any slowdown. Counts, per epoch, whether the slowed
# rank was named and whether any other rank was, by each measure; prints the highest score of a rank that kept pace,
# the margin that decides how low the threshold can go here.
# As srun --ddp binds each task to cores of its own, each rank is bound to one core (taskset), one rank per core by
# default: with more ranks than cores (RANKS=4 on 2 cores), a rank that shares its core with a busier one is slower
# by the host's clock, a real straggler of that machine, named as such. The quota needs root and a cgroup file
# system with the cpu controller (v2 or v1); without them that kind is left out. With them, every rank of every run
# gets a cgroup of its own, so that the ranks compete alike with whatever else runs on the machine.
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
QUOTA_PERIOD_MS=${QUOTA_PERIOD_MS:-10}
CORES=$(nproc)
RANKS=${RANKS:-$CORES}
SLOW=$((RANKS - 1))
TRAIN=$BUILD/runtime/ddp-train
[ -x "$TRAIN" ] || { echo "straggler_bench: $TRAIN is not built" >&2; exit 2; }
WORK=$(mktemp -d)
pids=()
# Each rank in a cgroup of its own (cgroup v2's cpu.max, or v1's cfs_quota_us), so that the ranks compete for the
# cores alike whatever else runs here; the slowed rank's group gets the quota in the quota runs.
CGROUP_ROOT=""
if [ -w /sys/fs/cgroup/cgroup.subtree_control ] && grep -qw cpu /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
  CGROUP_ROOT=/sys/fs/cgroup
elif [ -w /sys/fs/cgroup/cpu/cpu.cfs_quota_us ]; then
  CGROUP_ROOT=/sys/fs/cgroup/cpu
fi
QUOTA_GROUP=""
rank_groups=()
if [ -n "$CGROUP_ROOT" ]; then
  for ((rank = 0; rank < RANKS; rank++)); do
    rank_groups+=("$CGROUP_ROOT/ddp-straggler-bench-$$-$rank")
    mkdir "${rank_groups[$rank]}"
  done
  QUOTA_GROUP=${rank_groups[$SLOW]}
fi
# set_quota on|off: the slowed rank's quota, QUOTA_PCT of a CPU over QUOTA_PERIOD_MS.
set_quota() {
  local quota=max
  [ "$1" = off ] || quota=$((QUOTA_PCT * QUOTA_PERIOD_MS * 10))
  if [ -e "$QUOTA_GROUP/cpu.max" ]; then
    echo "$quota $((QUOTA_PERIOD_MS * 1000))" >"$QUOTA_GROUP/cpu.max"
  else
    echo $((QUOTA_PERIOD_MS * 1000)) >"$QUOTA_GROUP/cpu.cfs_period_us"
    echo "${quota/max/-1}" >"$QUOTA_GROUP/cpu.cfs_quota_us"
  fi
}
cleanup() {
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  for group in "${rank_groups[@]}"; do rmdir "$group" 2>/dev/null || true; done
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
  if [ -n "$QUOTA_GROUP" ]; then
    if [ "$slowdown" = quota ]; then set_quota on; else set_quota off; fi
    for rank in "${!pids[@]}"; do echo "${pids[$rank]}" >"${rank_groups[$rank]}/cgroup.procs"; done
  fi
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

# tally LOG: one line per epoch from rank 0's JSON lines: "SLOW_NAMED OTHERS_NAMED HIGHEST_OTHER_SCORE SLOW_SCORE",
# then the same four for the arrival at the all-reduce.
tally() {
  python3 - "$1" "$SLOW" <<'PY'
import json, sys
slow = int(sys.argv[2])
for line in open(sys.argv[1]):
    start = line.find('{"event": "stragglers"')
    if start < 0:
        continue
    epoch = json.loads(line[start:])
    fields = []
    for names, score in (("stragglers", "score"), ("late", "arrival_score")):
        named = set(epoch[names])
        scores = {r["rank"]: r[score] for r in epoch["ranks"]}
        others = max(s for rank, s in scores.items() if rank != slow)
        fields += [int(slow in named), len(named - {slow}), others, scores[slow]]
    print(*fields)
PY
}

higher() { awk -v a="$1" -v b="$2" 'BEGIN {print (a == "" || b > a) ? b : a}'; }
lower() { awk -v a="$1" -v b="$2" 'BEGIN {print (a == "" || b < a) ? b : a}'; }

declare -A epochs named falsely lowest
slowdowns=(stop)
[ -z "$QUOTA_GROUP" ] || slowdowns=(quota stop)
clean_epochs=0
declare -A false_clean highest
# count KIND MEASURE SLOW_NAMED OTHERS SCORE SLOW_SCORE: one epoch of a run with a slowdown, by one measure.
count() {
  local k=$1/$2
  epochs[$k]=$((${epochs[$k]:-0} + 1)) named[$k]=$((${named[$k]:-0} + $3))
  falsely[$k]=$((${falsely[$k]:-0} + ($4 > 0)))
  highest[$2]=$(higher "${highest[$2]:-}" "$5") lowest[$k]=$(lower "${lowest[$k]:-}" "$6")
}
for ((i = 0; i < RUNS; i++)); do
  for slowdown in "${slowdowns[@]}"; do
    run_ranks "$WORK/$slowdown$i" "$slowdown"
    while read -r c_named c_others c_score c_slow a_named a_others a_score a_slow; do
      count "$slowdown" compute "$c_named" "$c_others" "$c_score" "$c_slow"
      count "$slowdown" arrival "$a_named" "$a_others" "$a_score" "$a_slow"
    done < <(tally "$WORK/$slowdown$i/rank0.log")
  done
  run_ranks "$WORK/clean$i" none
  while read -r c_named c_others c_score c_slow a_named a_others a_score a_slow; do
    clean_epochs=$((clean_epochs + 1))
    false_clean[compute]=$((${false_clean[compute]:-0} + (c_others + c_named > 0)))
    false_clean[arrival]=$((${false_clean[arrival]:-0} + (a_others + a_named > 0)))
    highest[compute]=$(higher "${highest[compute]:-}" "$(higher "$c_score" "$c_slow")")
    highest[arrival]=$(higher "${highest[arrival]:-}" "$(higher "$a_score" "$a_slow")")
  done < <(tally "$WORK/clean$i/rank0.log")
done
report() {  # slowdown, its description
  local m
  for m in compute arrival; do
    echo "straggler_bench: rank $SLOW $2, by its $m: named in ${named[$1/$m]} of ${epochs[$1/$m]} epochs" \
      "(lowest score ${lowest[$1/$m]});" "another rank named in ${falsely[$1/$m]} of ${epochs[$1/$m]} epochs"
  done
}
echo "straggler_bench: $RANKS ranks of ddp-train (mlp, width 512) on $CORES cores, each bound to one," \
  "threshold $THRESHOLD%, $RUNS runs x $EPOCHS epochs of each kind"
if [ -n "$QUOTA_GROUP" ]; then
  report quota "under a CPU quota of $QUOTA_PCT% ($QUOTA_PERIOD_MS ms periods, a cgroup)"
else
  echo "straggler_bench: no CPU quota: needs root and a cgroup file system with the cpu controller"
fi
report stop "stopped ${STOP_MS} ms of every $((STOP_MS + RUN_MS)) ms"
for m in compute arrival; do
  echo "straggler_bench: no slowdown, by $m: a rank named in ${false_clean[$m]} of $clean_epochs epochs;" \
    "highest score of a rank that kept pace: ${highest[$m]}"
done
echo "straggler_bench: (compute scores are x the median: a threshold below (score - 1) x 100% would name that rank;" \
  "arrival scores are a share of the median step: below score x 100%)"
