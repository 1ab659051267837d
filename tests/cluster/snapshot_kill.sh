#!/usr/bin/env bash
# Nothing is lost when rank 0 is killed while it writes a snapshot (a model of ~70 MB of state): the unfinished file
# never counts as a snapshot, every snapshot left loads, the restarted step resumes from the last completed one, and
# the final model equals that of an uninterrupted run.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=training_lib.sh
source "$(dirname "$0")/training_lib.sh"

TRAINING=(EPOCHS=6 SAVE_EVERY=1 WORKLOAD=mlp TRAIN_ARGS="--width 2048 --samples 256 --keep 10")
TASKS=2  # multi-node.sbatch: one task on each of the cluster's 2 nodes

baseline=$(submit_template multi-node.sbatch "$TEST_DIR/baseline" "${TRAINING[@]}" -- --cpus-per-task=1)
expect_completed "$TEST_DIR/baseline" "$baseline" 240

dir=$TEST_DIR/killed
job=$(submit_template multi-node.sbatch "$dir" "${TRAINING[@]}" -- --cpus-per-task=1)
# The job's ranks, once both run and the snapshot directory is there to watch.
pids=()
for ((waited = 0; waited < 600; waited++)); do
  mapfile -t pids < <(job_pids "$job")
  [ ${#pids[@]} -lt "$TASKS" ] || [ ! -d "$dir/snapshots" ] || break
  case $(job_state "$job") in
    PENDING | RUNNING | CONFIGURING | "") sleep 0.2 ;;
    *) fail "job $job ended before its ranks were seen: $(job_output "$dir" "$job")" ;;
  esac
done
[ ${#pids[@]} -ge "$TASKS" ] || fail "job $job's $TASKS ranks did not start within 120 s: $(job_output "$dir" "$job")"
# Rank 0, killed as it opens the temporary file of a snapshot of 2 or more epochs run (fanotify holds the open until
# SIGKILL is sent): the write is caught whatever the machine's load, and a completed snapshot comes before it.
caught=$(python3 "$(dirname "$0")/kill_mid_write.py" --from-epoch 2 "$dir/snapshots" 120 "${pids[@]}") ||
  fail "rank 0 was not caught in a snapshot write: $(job_output "$dir" "$job")"
read -r torn _ _ writer_task _ <<<"$caught"
echo "killed in a snapshot write: $torn (task $writer_task)"
assert_eq 0 "$writer_task" "the snapshot writer is rank 0"
epochs=$((10#$(sed -E 's/^\.snapshot-e([0-9]+)-.*/\1/' <<<"$torn")))
expect_completed "$dir" "$job" 240
out=$(job_output "$dir" "$job")
assert_contains "$out" "Resuming training from snapshot at Epoch $((epochs - 1)) " \
  "resumed from the last completed snapshot, the one before the write killed"
assert_eq "" "$(find "$dir/snapshots" -name '.snapshot-*')" "the unfinished temporary file is removed on resume"
assert_snapshots_load "$dir/snapshots"
assert_same_models "$TEST_DIR/baseline/finalmodel.pt" "$dir/finalmodel.pt"
pass "killed as it began the snapshot of $epochs epochs: resumed from the one before, same final model"
