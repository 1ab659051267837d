#!/usr/bin/env bash
# How reliably ddp-train names a slow rank at a given --straggler-threshold (default 20%, ddp-train's own default),
# by its compute per step and by its arrival at the all-reduce (straggler.hpp).
# Each of RUNS rounds trains RANKS ranks on 127.0.0.1 three times: with the last rank under a CPU quota (QUOTA_PCT
# of a CPU over QUOTA_PERIOD_MS periods (10), a cgroup of its own: a throttled CPU), with the last rank stopped
# STOP_MS of every STOP_MS + RUN_MS milliseconds of wall-clock time (SIGSTOP and SIGCONT, as
# tests/runtime/resilience_test.cpp's tests do), and without any slowdown. Counts, per epoch, whether the slowed
# rank was named and whether any other rank was, by each measure; prints the highest score of a rank that kept pace,
# the margin that decides how low the threshold can go here. The arrival is also scored by the epoch's mean wait
# ("mean-arrival"), from the same epochs' wait_ms, beside ddp-train's groups of steps.
# As srun --ddp binds each task to cores of its own, each rank is bound to one core (taskset), one rank per core by
# default: with more ranks than cores (RANKS=4 on 2 cores), a rank that shares its core with a busier one is slower
# by the host's clock, a real straggler of that machine, named as such. The quota needs root and a cgroup file
# system with the cpu controller (v2 or v1); without them that kind is left out. With them, every rank of every run
# gets a cgroup of its own, so that the ranks compete alike with whatever else runs on the machine.
# SAMPLES (4096) sets the epoch's length: 2 ranks take 64 steps each of 4096 samples, and ddp-train scores the arrival
# in five groups of every fifth step, so in a short epoch a slowdown that lands once in six steps (a 100 ms quota) is
# spread over few steps per group.
#   [RANKS=N] [SAMPLES=N] bench/straggler_bench.sh [BUILD_DIR] [RUNS (5)] [THRESHOLD % (20)] [EPOCHS (3)]
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
SAMPLES=${SAMPLES:-4096}
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
      --workload mlp --width 512 --samples "$SAMPLES" --json --straggler-threshold "$THRESHOLD" "$EPOCHS" 0 \
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
# then the same four for the arrival at the all-reduce, then for the arrival by the epoch's mean wait (the median of
# all ranks' wait_ms less a rank's own, as a share of the median step: what ddp-train compared before it compared
# groups of steps), side by side from the same epochs.
tally() {
  python3 - "$1" "$SLOW" "$THRESHOLD" <<'PY'
import json, statistics, sys
slow, threshold = int(sys.argv[2]), float(sys.argv[3])
for line in open(sys.argv[1]):
    start = line.find('{"event": "stragglers"')
    if start < 0:
        continue
    epoch = json.loads(line[start:])
    wait = {r["rank"]: r["wait_ms"] for r in epoch["ranks"]}
    by_mean = {rank: (statistics.median(wait.values()) - own) / epoch["median_step_ms"] for rank, own in wait.items()}
    measures = [(set(epoch["stragglers"]), {r["rank"]: r["score"] for r in epoch["ranks"]}),
                (set(epoch["late"]), {r["rank"]: r["arrival_score"] for r in epoch["ranks"]}),
                ({rank for rank, s in by_mean.items() if s > threshold / 100}, by_mean)]
    fields = []
    for named, scores in measures:
        others = max(s for rank, s in scores.items() if rank != slow)
        fields += [int(slow in named), len(named - {slow}), round(others, 3), round(scores[slow], 3)]
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
# clean MEASURE SLOW_NAMED OTHERS SCORE SLOW_SCORE: one epoch without a slowdown, by one measure.
clean() {
  false_clean[$1]=$((${false_clean[$1]:-0} + ($2 + $3 > 0)))
  highest[$1]=$(higher "${highest[$1]:-}" "$(higher "$4" "$5")")
}
for ((i = 0; i < RUNS; i++)); do
  for slowdown in "${slowdowns[@]}"; do
    run_ranks "$WORK/$slowdown$i" "$slowdown"
    while read -r c_named c_others c_score c_slow a_named a_others a_score a_slow m_named m_others m_score m_slow; do
      count "$slowdown" compute "$c_named" "$c_others" "$c_score" "$c_slow"
      count "$slowdown" arrival "$a_named" "$a_others" "$a_score" "$a_slow"
      count "$slowdown" mean-arrival "$m_named" "$m_others" "$m_score" "$m_slow"
    done < <(tally "$WORK/$slowdown$i/rank0.log")
  done
  run_ranks "$WORK/clean$i" none
  while read -r c_named c_others c_score c_slow a_named a_others a_score a_slow m_named m_others m_score m_slow; do
    clean_epochs=$((clean_epochs + 1))
    clean compute "$c_named" "$c_others" "$c_score" "$c_slow"
    clean arrival "$a_named" "$a_others" "$a_score" "$a_slow"
    clean mean-arrival "$m_named" "$m_others" "$m_score" "$m_slow"
  done < <(tally "$WORK/clean$i/rank0.log")
done
MEASURES=(compute arrival mean-arrival)
report() {  # slowdown, its description
  local m
  for m in "${MEASURES[@]}"; do
    echo "straggler_bench: rank $SLOW $2, by its $m: named in ${named[$1/$m]} of ${epochs[$1/$m]} epochs" \
      "(lowest score ${lowest[$1/$m]});" "another rank named in ${falsely[$1/$m]} of ${epochs[$1/$m]} epochs"
  done
}
echo "straggler_bench: $RANKS ranks of ddp-train (mlp, width 512, $SAMPLES samples an epoch) on $CORES cores, each bound to one," \
  "threshold $THRESHOLD%, $RUNS runs x $EPOCHS epochs of each kind"
if [ -n "$QUOTA_GROUP" ]; then
  report quota "under a CPU quota of $QUOTA_PCT% ($QUOTA_PERIOD_MS ms periods, a cgroup)"
else
  echo "straggler_bench: no CPU quota: needs root and a cgroup file system with the cpu controller"
fi
report stop "stopped ${STOP_MS} ms of every $((STOP_MS + RUN_MS)) ms"
for m in "${MEASURES[@]}"; do
  echo "straggler_bench: no slowdown, by $m: a rank named in ${false_clean[$m]} of $clean_epochs epochs;" \
    "highest score of a rank that kept pace: ${highest[$m]}"
done
echo "straggler_bench: (compute scores are x the median: a threshold below (score - 1) x 100% would name that rank;" \
  "arrival scores are a share of the median step: below score x 100%; mean-arrival is the arrival by the epoch's" \
  "mean wait, not by groups of steps, for comparison)"
