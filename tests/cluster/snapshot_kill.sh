#!/usr/bin/env bash
# Nothing is lost when rank 0 is killed while it writes a snapshot (a model of ~70 MB of state, so the write is
# caught in flight): the half-written file never counts as a snapshot, every snapshot left loads, the restarted
# step resumes from the last completed one, and the final model equals that of an uninterrupted run.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=training_lib.sh
source "$(dirname "$0")/training_lib.sh"

TRAINING=(EPOCHS=6 SAVE_EVERY=1 WORKLOAD=mlp TRAIN_ARGS="--width 2048 --samples 256 --keep 10")
TEMPORARY_GLOB=".snapshot-e000003-*.tmp-*"  # epoch 3's snapshot while it is being written
TEMPORARY_RE='^\.snapshot-e000003-.*\.tmp-'
injector=$(stage "$(dirname "$0")/kill_rank.sh")

baseline=$(submit_template multi-node.sbatch "$TEST_DIR/baseline" "${TRAINING[@]}" -- --cpus-per-task=1)
expect_completed "$TEST_DIR/baseline" "$baseline" 240
# The kill is meant to land during the write; on a busy machine SIGKILL can arrive after the write has ended. Such
# a miss says nothing about snapshots: the run is made again, up to three times, before the test gives up.
for attempt in 1 2 3; do
  killed_dir=$TEST_DIR/killed-$attempt
  listing=$killed_dir/listing
  killed=$(submit_template multi-node.sbatch "$killed_dir" "${TRAINING[@]}" DDP_TRAIN="$injector" \
    REAL_TRAIN="$STAGED_TRAIN" KILL_RANK=0 KILL_WHEN="$TEMPORARY_GLOB" KILL_LISTING="$listing" -- --cpus-per-task=1)
  expect_completed "$killed_dir" "$killed" 240
  out=$(job_output "$killed_dir" "$killed")
  [ -s "$listing" ] || fail "rank 0 was never killed; output: $out"
  grep -q "$TEMPORARY_RE" "$listing" && break
  echo "attempt $attempt: rank 0 was killed after its write of epoch 3 had ended ($(paste -sd' ' "$listing")); again"
  [ "$attempt" -lt 3 ] || fail "three kills in a row came after the write of epoch 3 had ended; not a kill during a write"
done
assert_eq "" "$(grep '^snapshot-e000003-' "$listing" || true)" "the snapshot of epoch 3 was incomplete when killed"
assert_contains "$out" "Resuming training from snapshot at Epoch 2 " "resumed from the last completed snapshot"
assert_eq "" "$(find "$killed_dir/snapshots" -name '.snapshot-*')" "the torn temporary file is removed on resume"
assert_snapshots_load "$killed_dir/snapshots"
assert_same_models "$TEST_DIR/baseline/finalmodel.pt" "$killed_dir/finalmodel.pt"
pass "killed during the write of a snapshot: resumed from the previous one, same final model"
