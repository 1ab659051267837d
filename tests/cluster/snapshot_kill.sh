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
injector=$(stage "$(dirname "$0")/kill_rank.sh")
listing=$TEST_DIR/killed/listing

baseline=$(submit_template multi-node.sbatch "$TEST_DIR/baseline" "${TRAINING[@]}" -- --cpus-per-task=1)
killed=$(submit_template multi-node.sbatch "$TEST_DIR/killed" "${TRAINING[@]}" DDP_TRAIN="$injector" \
  REAL_TRAIN="$STAGED_TRAIN" KILL_RANK=0 KILL_WHEN=".snapshot-e000003-*.tmp-*" KILL_LISTING="$listing" \
  -- --cpus-per-task=1)
expect_completed "$TEST_DIR/baseline" "$baseline" 240
expect_completed "$TEST_DIR/killed" "$killed" 240

out=$(job_output "$TEST_DIR/killed" "$killed")
[ -s "$listing" ] || fail "rank 0 was never killed; output: $out"
grep -q '^\.snapshot-e000003-.*\.tmp-' "$listing" ||
  fail "rank 0 was killed after its write of epoch 3 had ended (listing: $(paste -sd' ' "$listing")); not a kill during a write"
assert_eq "" "$(grep '^snapshot-e000003-' "$listing" || true)" "the snapshot of epoch 3 was incomplete when killed"
assert_contains "$out" "Resuming training from snapshot at Epoch 2 " "resumed from the last completed snapshot"
assert_eq "" "$(find "$TEST_DIR/killed/snapshots" -name '.snapshot-*')" "the torn temporary file is removed on resume"
assert_snapshots_load "$TEST_DIR/killed/snapshots"
assert_same_models "$TEST_DIR/baseline/finalmodel.pt" "$TEST_DIR/killed/finalmodel.pt"
pass "killed during the write of a snapshot: resumed from the previous one, same final model"
