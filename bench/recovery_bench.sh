#!/usr/bin/env bash
# Recovery in place against a restart from a snapshot, side by side in one run, with RANKS ranks of ddp-train on
# 127.0.0.1 (each in its own process group; nothing of Slurm: the restart is what ddp-restart and srun's
# kill-on-bad-exit do, done here by this script):
#   1. SIGKILL of a rank -> the survivors' next completed step (the "Recovered in place" line rank 0 prints after
#      it), TRIES times;
#   2. SIGSTOP of a rank -> the next completed step, at --timeout TIMEOUT;
#   3. a replacement (--join) from its start to its first step in the group;
#   4. training efficiency: the same training (EPOCHS epochs, about DURATION seconds without faults) with one rank
#      killed every PERIOD seconds, (a) in place with a replacement started at once, as ddp-restart does, and
#      (b) ended and restarted from the newest snapshot (--snapshot-every-seconds SNAPSHOT_EVERY) as
#      ddp-restart does, each as samples/s over the clean run's.
#   [RANKS=4 TRIES=5 TIMEOUT=5 DURATION=600 PERIOD=60 SNAPSHOT_EVERY=30] bench/recovery_bench.sh [BUILD_DIR]
# BASELINE_BUILD=DIR: 1 to 3 also with DIR's ddp-train, try by try in turn with BUILD_DIR's, each median beside the
# baseline's with their ratio (another version of ddp-train, e.g. before a change of its store). DURATION=0: 1 to 3
# only.
# Recovery in place needs a ddp-train built with LibTorch 2.x: on Debian 12, in a root, e.g.
#   tests/stacks/root.sh run forky -- bench/recovery_bench.sh build-debian14
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(realpath "${1:-$ROOT/build}")
TRAIN=$BUILD/runtime/ddp-train
RANKS=${RANKS:-4}
TRIES=${TRIES:-5}
TIMEOUT=${TIMEOUT:-5}
DURATION=${DURATION:-600}
PERIOD=${PERIOD:-60}
SNAPSHOT_EVERY=${SNAPSHOT_EVERY:-30}
WIDTH=${WIDTH:-256}
SAMPLES=${SAMPLES:-8192}
[ -x "$TRAIN" ] || { echo "recovery_bench: $TRAIN is not built" >&2; exit 2; }
TRAINS=("$TRAIN")
if [ -n "${BASELINE_BUILD:-}" ]; then
  TRAINS+=("$(realpath "$BASELINE_BUILD")/runtime/ddp-train")
  [ -x "${TRAINS[1]}" ] || { echo "recovery_bench: ${TRAINS[1]} is not built" >&2; exit 2; }
fi
train=$TRAIN  # the ddp-train that start_ranks and start_replacement run
WORK=$(mktemp -d)
pids=()
cleanup() {
  local pid
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; kill -CONT "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# start_ranks DIR EPOCHS [ARGS...]: RANKS ranks in the background; pids in $pids, rank r's output in DIR/rank<r>.log.
start_ranks() {
  local dir=$1 epochs=$2 port rank
  shift 2
  mkdir -p "$dir"
  port=$(free_port)
  pids=()
  for ((rank = 0; rank < RANKS; rank++)); do
    env MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" WORLD_SIZE="$RANKS" LOCAL_WORLD_SIZE="$RANKS" RANK=$rank \
      LOCAL_RANK=$rank "$train" "${COMMON[@]}" --snapshot-dir "$dir" --output "$dir/final.pt" "$@" "$epochs" 0 \
      >>"$dir/rank$rank.log" 2>&1 &
    pids+=($!)
  done
}

# start_replacement DIR EPOCHS: a replacement that joins the run in DIR; its pid is added to $pids.
# start_replacement DIR EPOCHS: sets `replacement_log` (named before the process exists, so that a caller waiting
# for its lines does not glob for a file the background process has not created yet).
start_replacement() {
  replacement_log=$1/replacement${#pids[@]}.log
  : >"$replacement_log"
  # The ranks share this machine's cores: a replacement started as a world of one would take all of them for its
  # intra-op threads, as the ranks take their share (cores / LOCAL_WORLD_SIZE), and slow every step of the group.
  env OMP_NUM_THREADS="$(( $(nproc) / RANKS > 0 ? $(nproc) / RANKS : 1 ))" MASTER_ADDR=127.0.0.1 MASTER_PORT=1 \
    WORLD_SIZE=1 RANK=0 "$train" "${COMMON[@]}" --recover in-place --join \
    --snapshot-dir "$1" --output "$1/final.pt" "$2" 0 >>"$replacement_log" 2>&1 &
  pids+=($!)
}

# until_line FILE... PATTERN: until the files hold a line matching PATTERN. Ends the bench, with the files' last
# lines, when none of the processes it started is left to write one (a refused option, a crash).
until_line() {
  local pattern=${*: -1} files=("${@:1:$#-1}") pid alive
  until [ "$(cat "${files[@]}" 2>/dev/null | grep -cE "$pattern")" -ge 1 ]; do
    alive=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1 && break; done
    if [ "$alive" = 0 ]; then
      echo "recovery_bench: every process ended before a line matching '$pattern'; last lines:" >&2
      tail -n 3 "${files[@]}" >&2
      exit 1
    fi
    sleep 0.005
  done
}

wait_all() { local pid; for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done; pids=(); }

COMMON=(--workload mlp --width "$WIDTH" --samples "$SAMPLES" --timeout "$TIMEOUT")
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# 1 and 2: a kill or a stop of rank 1 once rank 0 has trained two epochs; the time to the next completed step.
detect() {  # SIGNAL TRY
  local dir=$WORK/$1-$2 t0 t1
  start_ranks "$dir" 100000 --recover in-place
  until_line "$dir/rank0.log" '^Epoch 1 \| Loss'
  kill "-$1" "${pids[1]}"
  t0=$(now)
  # The new rank 0 says so: the first survivor, in rank order, that answered in time (not always rank 0 on a
  # loaded machine).
  until_line "$dir"/rank*.log 'Recovered in place'
  t1=$(now)
  elapsed "$t0" "$t1"
  [ "$1" != STOP ] || kill -CONT "${pids[1]}"
  kill -KILL "${pids[@]}" 2>/dev/null || true
  wait_all
}
# 3: a replacement for a killed rank, from its start to its first step in the group.
join() {  # TRY
  local dir=$WORK/join-$1 t0
  start_ranks "$dir" 100000 --recover in-place
  until_line "$dir/rank0.log" '^Epoch 1 \| Loss'
  kill -KILL "${pids[1]}"
  until_line "$dir"/rank*.log 'Recovered in place'
  t0=$(now)
  start_replacement "$dir" 100000
  until_line "$replacement_log" 'Joined the run'
  elapsed "$t0" "$(now)"
  kill -KILL "${pids[@]}" 2>/dev/null || true
  wait_all
}

# Each ddp-train's times, in turn within each try (index j of TRAINS): space-separated seconds.
kill_times=() stop_times=() join_times=()
for ((i = 0; i < TRIES; i++)); do
  for j in "${!TRAINS[@]}"; do
    train=${TRAINS[$j]}
    kill_times[j]+=" $(detect KILL "$j-$i")"
    stop_times[j]+=" $(detect STOP "$j-$i")"
    join_times[j]+=" $(join "$j-$i")"
  done
done
train=$TRAIN

# 4: the clean run sets the number of epochs that last about DURATION seconds. An epoch's time is the difference
# of a run of 8 epochs and one of 2, divided by 6: the start of the processes and their rendezvous (seconds, on a
# loaded machine) counted as epochs made the runs last less than half of DURATION.
timed_run() {  # EPOCHS: seconds for a clean run of EPOCHS epochs
  local t0
  t0=$(now)
  start_ranks "$WORK/calibrate-$1" "$1"
  wait_all
  elapsed "$t0" "$(now)"
}
short=$(timed_run 2)
long=$(timed_run 8)
epoch_seconds=$(awk -v s="$short" -v l="$long" 'BEGIN { e = (l - s) / 6; print (e > 0 ? e : l / 8) }')
EPOCHS=$(awk -v d="$DURATION" -v e="$epoch_seconds" 'BEGIN { n = int(d / e); print n < 2 ? 2 : n }')

run_clean() {
  local t0
  t0=$(now)
  start_ranks "$WORK/clean" "$EPOCHS"
  wait_all
  elapsed "$t0" "$(now)"
}

# In place: every PERIOD seconds a rank (in turn, rank 0 included) is killed and a replacement started at once.
run_in_place() {
  local dir=$WORK/in-place t0 next=$PERIOD victim=1 alive pid
  t0=$(now)
  start_ranks "$dir" "$EPOCHS" --recover in-place
  while :; do
    alive=()
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive+=("$pid"); done
    [ "${#alive[@]}" -gt 0 ] || break
    if [ "${#alive[@]}" -gt 1 ] && awk -v e="$(elapsed "$t0" "$(now)")" -v n="$next" 'BEGIN { exit !(e >= n) }'; then
      kill -KILL "${alive[$((victim % ${#alive[@]}))]}"
      victim=$((victim + 1))
      start_replacement "$dir" "$EPOCHS"
      next=$((next + PERIOD))
    fi
    sleep 0.1
  done
  wait_all
  elapsed "$t0" "$(now)"
}

# From a snapshot: at each kill the other ranks are ended too (srun's kill-on-bad-exit), and all start again.
run_restarts() {
  local dir=$WORK/restart t0 next victim=1 done=0
  t0=$(now)
  next=$PERIOD
  while [ "$done" = 0 ]; do
    start_ranks "$dir" "$EPOCHS" --snapshot-every-seconds "$SNAPSHOT_EVERY"
    while :; do
      if ! kill -0 "${pids[0]}" 2>/dev/null; then
        wait_all
        done=1
        break
      fi
      if awk -v e="$(elapsed "$t0" "$(now)")" -v n="$next" 'BEGIN { exit !(e >= n) }'; then
        kill -KILL "${pids[$((victim % RANKS))]}"
        sleep 0.2
        kill -KILL "${pids[@]}" 2>/dev/null || true
        wait_all
        victim=$((victim + 1))
        next=$((next + PERIOD))
        break
      fi
      sleep 0.1
    done
  done
  elapsed "$t0" "$(now)"
}

# One line of 1 to 3: this ddp-train's median and times, and where there is a baseline, its median and the ratio.
times_line() {  # WHAT TIMES0 [TIMES1]
  local what=$1 this baseline median0 median1
  read -ra this <<<"$2"
  median0=$(printf '%s\n' "${this[@]}" | median)
  if [ -z "${3:-}" ]; then
    echo "recovery_bench: $what: median $median0 s (${this[*]})"
    return
  fi
  read -ra baseline <<<"$3"
  median1=$(printf '%s\n' "${baseline[@]}" | median)
  echo "recovery_bench: $what: median $median0 s (${this[*]}); baseline $median1 s (${baseline[*]});" \
    "this / baseline $(awk -v a="$median0" -v b="$median1" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }')"
}

echo "recovery_bench: $RANKS ranks of ddp-train (mlp, width $WIDTH, $SAMPLES samples) on $(nproc) cores, 127.0.0.1"
[ -z "${BASELINE_BUILD:-}" ] || echo "recovery_bench: this: $TRAIN; baseline: ${TRAINS[1]}"
times_line "SIGKILL of a rank -> next completed step" "${kill_times[0]}" "${kill_times[1]:-}"
times_line "SIGSTOP of a rank -> next completed step at --timeout $TIMEOUT" "${stop_times[0]}" "${stop_times[1]:-}"
times_line "a replacement from its start to its first step" "${join_times[0]}" "${join_times[1]:-}"
[ "$DURATION" != 0 ] || exit 0

clean=$(run_clean)
in_place=$(run_in_place)
restarts=$(run_restarts)
samples=$(awk -v e="$EPOCHS" -v n="$SAMPLES" 'BEGIN { print e * n }')
rate() { awk -v s="$samples" -v t="$1" 'BEGIN { printf "%.0f", s / t }'; }
ratio() { awk -v c="$clean" -v t="$1" 'BEGIN { printf "%.1f%%", 100 * c / t }'; }

echo "recovery_bench: $EPOCHS epochs ($samples samples), a rank killed every $PERIOD s:"
echo "recovery_bench:   clean           $clean s, $(rate "$clean") samples/s"
echo "recovery_bench:   in place        $in_place s, $(rate "$in_place") samples/s, $(ratio "$in_place") of clean" \
  "(a replacement started at each kill)"
echo "recovery_bench:   from snapshots  $restarts s, $(rate "$restarts") samples/s, $(ratio "$restarts") of clean" \
  "(all ranks restarted at each kill, a snapshot every $SNAPSHOT_EVERY s)"
