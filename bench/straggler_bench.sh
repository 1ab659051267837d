#!/usr/bin/env bash
# How reliably ddp-train names a slow rank at a given --straggler-threshold (default 20%, ddp-train's own default):
# RUNS runs of 4 ranks on 127.0.0.1 with rank 2 stopped STOP_MS of every STOP_MS + RUN_MS milliseconds (SIGSTOP and
# SIGCONT, as tests/runtime/resilience_test.cpp's Stragglers test does), and RUNS runs without any slowdown. Counts,
# per epoch, whether rank 2 was named and whether any other rank was; prints the other ranks' highest score, the
# margin that decides how low the threshold can go on this machine.
#   bench/straggler_bench.sh [BUILD_DIR] [RUNS (5)] [THRESHOLD % (20)] [EPOCHS (3)]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(realpath "${1:-$ROOT/build}")
RUNS=${2:-5}
THRESHOLD=${3:-20}
EPOCHS=${4:-3}
STOP_MS=${STOP_MS:-60}
RUN_MS=${RUN_MS:-5}
RANKS=4 SLOW=2
TRAIN=$BUILD/runtime/ddp-train
[ -x "$TRAIN" ] || { echo "straggler_bench: $TRAIN is not built" >&2; exit 2; }
WORK=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# run_ranks DIR SLOWED(0|1): one run of ddp-train; rank 0's output in DIR/rank0.log.
run_ranks() {
  local dir=$1 slowed=$2 port rank
  mkdir -p "$dir"
  port=$(free_port)
  pids=()
  for ((rank = 0; rank < RANKS; rank++)); do
    env MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" WORLD_SIZE=$RANKS LOCAL_WORLD_SIZE=$RANKS RANK=$rank \
      LOCAL_RANK=$rank "$TRAIN" --snapshot-dir "$dir" --output "$dir/final.pt" --workload mlp --width 512 \
      --samples 4096 --json --straggler-threshold "$THRESHOLD" "$EPOCHS" 0 >"$dir/rank$rank.log" 2>&1 &
    pids+=($!)
  done
  if [ "$slowed" = 1 ]; then
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

slow_epochs=0 slow_named=0 false_slow=0 clean_epochs=0 false_clean=0 highest="" slow_low=""
for ((i = 0; i < RUNS; i++)); do
  run_ranks "$WORK/slow$i" 1
  while read -r named others score slow_score; do
    slow_epochs=$((slow_epochs + 1)) slow_named=$((slow_named + named)) false_slow=$((false_slow + (others > 0)))
    highest=$(higher "$highest" "$score") slow_low=$(lower "$slow_low" "$slow_score")
  done < <(tally "$WORK/slow$i/rank0.log")
  run_ranks "$WORK/clean$i" 0
  while read -r named others score slow_score; do
    clean_epochs=$((clean_epochs + 1)) false_clean=$((false_clean + (others + named > 0)))
    highest=$(higher "$highest" "$(higher "$score" "$slow_score")")
  done < <(tally "$WORK/clean$i/rank0.log")
done
echo "straggler_bench: $RANKS ranks of ddp-train (mlp, width 512) on $(nproc) cores, threshold $THRESHOLD%, $RUNS runs x $EPOCHS epochs each"
echo "straggler_bench: rank $SLOW stopped ${STOP_MS} ms of every $((STOP_MS + RUN_MS)) ms: named in $slow_named of $slow_epochs epochs (lowest score ${slow_low}x); another rank named in $false_slow of $slow_epochs epochs"
echo "straggler_bench: no slowdown: a rank named in $false_clean of $clean_epochs epochs"
echo "straggler_bench: highest score of a rank that kept pace: ${highest}x (a threshold below $(awk -v s="$highest" 'BEGIN {printf "%.0f", (s - 1) * 100}')% would have named it)"
