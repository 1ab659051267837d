#!/usr/bin/env bash
# Recovery in place under Slurm, on a 3-node test cluster of its own (brought up after the shared 2-node cluster is
# down, and torn down at the end): multi-node.sbatch with RECOVER=in-place (srun --ddp-recover, ddp-train --recover
# in-place), 3 nodes x 2 tasks, ddp-restart starting replacements in steps of their own on the free CPUs.
# - faults, in one run of 6 ranks (--timeout 5): rank 5 stopped (the others go on after the timeout; continued, it
#   finds itself left out and ends); ranks 3 and 4 killed at once; rank 2 killed right after that recovery;
#   replacements for each failed task, one of them killed while it is taken in; rank 0 (whichever rank leads by then)
#   killed while it writes a snapshot in the background. No fault ends the step: training finishes, srun still names
#   every failed task, ddp-restart counts the step as done, and the final loss is within 10% of an uninterrupted
#   run's;
# - more failures than --min-ranks allows (--min-ranks 6, one rank killed): a snapshot of the last completed step,
#   ddp-restart starts the step again, which resumes from it and ends with the uninterrupted run's model, bit for bit.
# Neither the jobs' output nor any text file they wrote holds key material.
# Speed is measured in bench/recovery_bench.sh, not here.
set -euo pipefail
CLUSTER_SH=$(cd "$(dirname "$0")" && pwd)/cluster.sh
[ "$(id -u)" -eq 0 ] || { echo "SKIP recover_in_place: needs root: the test cluster runs slurmd in network namespaces"; exit 77; }
[ -n "${DDP_PLUGIN:-}" ] || { echo "SKIP recover_in_place: the plugin is not built"; exit 77; }
[ -x "${DDP_BUILD_DIR:-}/runtime/ddp-train" ] || { echo "SKIP recover_in_place: ddp-train is not built"; exit 77; }
trap '"$CLUSTER_SH" down >/dev/null 2>&1' EXIT
"$CLUSTER_SH" up --nodes 4 --plugin "$DDP_PLUGIN"
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck disable=SC2016  # expanded at exit, after lib.sh's own clean-ups
on_exit '"$CLUSTER_SH" down >/dev/null'
# shellcheck source=training_lib.sh
source "$(dirname "$0")/training_lib.sh"

# The second run must outlast every fault and the replacements that follow them: a replacement takes 2 to 8 s from
# its srun to its first step on this test's 2 CPUs (LibTorch loads, the run takes it in at a step boundary), and
# three start at once after the kills. 2048 samples (about 20 s of training) once ended the run before the last two
# had joined; 6144 give them three times that.
EPOCHS=150
TRAIN_ARGS="--width 64 --samples 6144 --timeout 5 --snapshot-every-seconds 1"
# The fallback's restart meets at rank 0's store within --timeout: 5 s once passed before rank 0 of the restarted step
# had started its store, under CI's load (6 ranks loading LibTorch on 2 CPUs). A killed rank is seen at once (its
# connections close), so its longer timeout changes nothing else.
FALLBACK_ARGS="--width 64 --samples 6144 --timeout 60 --snapshot-every-seconds 1 --min-ranks 6"
TRAINING=(NODES=3 TASKS_PER_NODE=2 RECOVER=in-place WORKLOAD=mlp "EPOCHS=$EPOCHS" SAVE_EVERY=0 MAX_RESTARTS=6)
SBATCH=(--nodes=3 --ntasks-per-node=2 --cpus-per-task=1)
# The faults' run: its step on 3 of 4 nodes; the first replacement goes to the spare node, the later ones beside the
# tasks of the other nodes (a step keeps its CPUs until it ends, also those of its failed tasks). Without GPUs:
# Slurm lets steps share CPUs (--overlap), not GPUs, so on GPUs only a spare node takes a replacement.
SPARE=(--nodes=4 --ntasks-per-node=2 --cpus-per-task=1 --gpus-per-node=0)

# pid_of JOB STEP RANK: that task's ddp-train.
pid_of() {
  local pids
  pids=$(ddp_train_pids "SLURM_JOB_ID=$1" "SLURM_STEP_ID=$2" "RANK=$3")
  [ -n "$pids" ] || fail "no ddp-train of job $1, step $2, rank $3"
  echo "${pids%%$'\n'*}"
}

# The replacements of JOB (steps after the first) that are running, newest last.
replacement_pids() { ddp_train_pids "SLURM_JOB_ID=$1" "!SLURM_STEP_ID=0"; }

# await DIR JOB PATTERN [COUNT] [SECONDS]: until the job's output holds COUNT (1) lines matching PATTERN (ERE).
await() {
  local end=$((SECONDS + ${5:-120}))
  until [ "$(job_output "$1" "$2" | grep -cE "$3")" -ge "${4:-1}" ]; do
    [ "$SECONDS" -lt "$end" ] || fail "job $2: no line /$3/ (${4:-1}) within ${5:-120} s: $(job_output "$1" "$2")"
    sleep 0.05
  done
}

# The loss of the run's last epoch, as rank 0 printed it.
final_loss() { job_output "$1" "$2" | sed -n "s/^Epoch $((EPOCHS - 1)) | Loss: \([0-9.]*\) .*/\1/p" | tail -n 1; }

# The criterion: the final loss within 10% of the uninterrupted run's (a smaller world for a while, the same data).
within_loss_range() {  # CLEAN FAULTED
  awk -v c="$1" -v f="$2" 'BEGIN { exit !(c > 0 && f > 0 && f <= 1.1 * c && f >= 0.9 * c) }' ||
    fail "final loss $2 is not within 10% of the uninterrupted run's $1"
}

# 1. Uninterrupted, and more failures than --min-ranks allows (at once: 12 CPUs for 2 x 6 tasks).
baseline=$(submit_template multi-node.sbatch "$TEST_DIR/baseline" "${TRAINING[@]}" TRAIN_ARGS="$TRAIN_ARGS" -- "${SBATCH[@]}")
fallback=$(submit_template multi-node.sbatch "$TEST_DIR/fallback" "${TRAINING[@]}" MAX_RESTARTS=1 \
  TRAIN_ARGS="$FALLBACK_ARGS" -- "${SBATCH[@]}")
await "$TEST_DIR/fallback" "$fallback" '^Epoch 5 \| Loss'
kill -KILL "$(pid_of "$fallback" 0 3)"
expect_completed "$TEST_DIR/baseline" "$baseline" 360
expect_completed "$TEST_DIR/fallback" "$fallback" 360
out=$(job_output "$TEST_DIR/fallback" "$fallback")
assert_match "$out" "ddp-train: rank 3 on node2 \(cpu\) was lost \([^)]*\); 5 of 6 ranks answer, fewer than --min-ranks 6: training cannot go on in place; this rank wrote a snapshot of step [0-9]+ " \
  "below --min-ranks, rank 0 writes a snapshot of the last completed step"
# The node of the killed task. Which of its two tasks srun names first is not fixed: rank 2 exits (status 1) once
# the run cannot go on, and under CI's load srun printed node2's "task 2: Exited with exit code 1" before its
# "task 3: Killed" (Debian 14): node2's slurmstepd had not reported the killed task before rank 2 ended.
assert_match "$out" "ddp-restart: attempt 1 failed with exit code [0-9]+; first to fail: node2 \(task (3: Killed|2: Exited with exit code 1)\)" \
  "the step ended, naming the killed task's node"
assert_match "$out" "Resuming training from snapshot at Epoch ([5-9]|[1-9][0-9]) " "the restart resumed from that snapshot"
assert_same_models "$TEST_DIR/baseline/finalmodel.pt" "$TEST_DIR/fallback/finalmodel.pt"

# 2. The faults of one run, none of which ends its step.
dir=$TEST_DIR/faults
job=$(submit_template multi-node.sbatch "$dir" "${TRAINING[@]}" DEVICE=cpu TRAIN_ARGS="$TRAIN_ARGS" -- "${SPARE[@]}")
await "$dir" "$job" '^Epoch 2 \| Loss'
stopped=$(pid_of "$job" 0 5)
kill -STOP "$stopped"
on_exit "kill -CONT $stopped 2>/dev/null"
await "$dir" "$job" '\| Recovered in place: rank 5 on node3 \(cpu\) lost'
kill -CONT "$stopped"
await "$dir" "$job" '\| Grew in place: rank 6 on node[124] \(cpu\) joined'
# The replacements' requests to join so far: the one for rank 5. Those for ranks 3, 4 and 2 may ask before rank 2's
# recovery is seen (ddp-restart starts them as srun reports each failure).
asked=$(job_output "$dir" "$job" | grep -c '^Replacement: asked' || true)
kill -KILL "$(pid_of "$job" 0 3)" "$(pid_of "$job" 0 4)"
await "$dir" "$job" '\| Recovered in place: rank 3 on node2 \(cpu\) and rank 4 on node3 \(cpu\) lost'
kill -KILL "$(pid_of "$job" 0 2)"
await "$dir" "$job" '\| Recovered in place: rank 2 on node2 \(cpu\) lost'
# A replacement killed once it has asked to join, before it is healed.
await "$dir" "$job" '^Replacement: asked' $((asked + 1))
replacements=$(replacement_pids "$job")
kill -KILL "$(tail -n 1 <<<"$replacements")"
# The others are taken in without it: the replacements for ranks 5, 4, 3 and 2, less the one killed (replacements
# that ask at about the same time join at the same step).
await "$dir" "$job" '\] Joined the run as rank ' 3
# Rank 0 as it writes a snapshot in the background: killed while its open of the temporary file is held (fanotify),
# so the unfinished file is there when it dies. Which process is rank 0 by now is not known (the rank with the
# newest state leads after each recovery): the one caught writing.
snapshots=$dir/snapshots
recovered=$(job_output "$dir" "$job" | grep -c '| Recovered in place: ' || true)
# shellcheck disable=SC2046  # one argument per pid
caught=$(python3 "$(dirname "$0")/kill_mid_write.py" "$snapshots" 60 $(job_pids "$job")) ||
  fail "rank 0 was not caught in a snapshot write: $(job_output "$dir" "$job")"
read -r torn _ writer_step writer_task writer_node <<<"$caught"
echo "rank 0 killed in a snapshot write: $torn (step $writer_step, task $writer_task on $writer_node)"
await "$dir" "$job" '\| Recovered in place: ' $((recovered + 1))
expect_completed "$dir" "$job" 360
out=$(job_output "$dir" "$job")
grep -E '^(ddp-restart|srun: error|ddp-train: )|Recovered in place|Grew in place|Joined' <<<"$out" || true
assert_contains "$out" "ddp-train: rank 5 on node3 (cpu) was left out" "the stopped rank, continued, ended"
failures=("node3: task 5: Exited with exit code 1" "node2: task 3: Killed" "node3: task 4: Killed" "node2: task 2: Killed")
# A replacement's srun names its task in its own step's terms; the first step's tasks, as above.
[ "$writer_step" != 0 ] || failures+=("$writer_node: task $writer_task: Killed")
for failed in "${failures[@]}"; do
  assert_contains "$out" "srun: error: $failed" "srun named the failed task"
done
assert_match "$out" "ddp-restart: attempt 1 ended with exit code [0-9]+, but its tasks completed the training in place" \
  "ddp-restart counted the step as done"
assert_contains "$out" "ddp-train: training completed in place by " "rank 0 at the end"
assert_match "$out" "ddp-restart: ddp-why: step $job\\.0: first failure: " "ddp-why names the first failure"
assert_match "$out" "Final model saved at finalmodel.pt" "the final model, by the last rank 0"
[ -s "$dir/finalmodel.pt" ] || fail "no final model at $dir/finalmodel.pt"
# The torn temporary: removed by a next rank 0 on the killed writer's node, whose lock there proves the writer gone;
# left by one on another node (where locks are node-local, a lock says nothing of another node's writer) until it
# has been untouched for an hour. Never anything else.
left=$(find "$snapshots" -name '.snapshot-*' -printf '%f\n')
[ -z "$left" ] || assert_match "$left" "^\.snapshot-e[0-9]{6}-s[0-9]{12}-r[^/]*\.pt\.tmp-$writer_node-[0-9a-f]{16}$" \
  "only the killed writer's temporary is left, named with its node"
assert_snapshots_load "$snapshots"
clean=$(final_loss "$TEST_DIR/baseline" "$baseline")
faulted=$(final_loss "$dir" "$job")
within_loss_range "$clean" "$faulted"
# No key material (core/redact.hpp) in what the runs printed or wrote: the replacement killed while it was taken in
# left the others waiting for its Gloo keys, and c10d's timeout names them.
for run in "$TEST_DIR/baseline $baseline" "$TEST_DIR/fallback $fallback" "$dir $job"; do
  read -r run_dir run_job <<<"$run"
  leaks=$(job_output "$run_dir" "$run_job" | grep -oE '[0-9a-fA-F]{32,}' || true)
  assert_eq "" "$leaks" "key material in the output of job $run_job"
done
assert_eq "" "$(find "$TEST_DIR" -type f ! -name '*.pt' ! -name '.ddp-group-*' -exec grep -IlE '[0-9a-fA-F]{32,}' {} + || true)" \
  "files the runs wrote with key material in them"
# A group file opens with its seal, a MAC, which is no secret; the rest of it holds none.
while IFS= read -r -d '' group_file; do
  assert_eq "" "$(tail -n +2 "$group_file" | grep -oE '[0-9a-fA-F]{32,}' || true)" "key material in $group_file"
done < <(find "$TEST_DIR" -type f -name '.ddp-group-*' -print0)
pass "in place under Slurm: stopped, two at once, right after a recovery, a replacement killed while taken in, rank 0 during a snapshot write ($writer_node) (final loss $faulted against $clean); below --min-ranks the restart resumed from the fallback's snapshot, bit for bit"
