#!/usr/bin/env bash
# A hung rank under ddp-train: one rank of multi-node.sbatch is stopped (SIGSTOP: a hung process
# or node) after a snapshot. The other ranks' next collective fails at --timeout, rank 0 names the stopped rank in
# one line, the step ends (srun's kill-on-bad-exit, which --ddp turns on), ddp-restart shows the first failure as
# ddp-why tells it and starts the step again, and training resumes from the newest snapshot to the end.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=training_lib.sh
source "$(dirname "$0")/training_lib.sh"

injector=$(stage "$(dirname "$0")/kill_rank.sh")
job=$(submit_template multi-node.sbatch "$TEST_DIR/hang" EPOCHS=60 SAVE_EVERY=10 \
  TRAIN_ARGS="--timeout 10" DDP_TRAIN="$injector" REAL_TRAIN="$STAGED_TRAIN" KILL_RANK=3 KILL_SIGNAL=STOP \
  KILL_WHEN="snapshot-e000021-*.pt" KILL_LISTING="$TEST_DIR/hang/listing" -- --cpus-per-task=1 --ntasks-per-node=2)
expect_completed "$TEST_DIR/hang" "$job" 300
out=$(job_output "$TEST_DIR/hang" "$job")
[ -s "$TEST_DIR/hang/listing" ] || fail "rank 3 was never stopped; output: $out"
verdict="rank 3 on node2 \\(cpu\\) did not answer within [0-9.]+ s after a collective failed \\([^)]*\\): stopped, hung or gone"
assert_eq 1 "$(grep -cE "^ddp-train: $verdict$" <<<"$out")" "rank 0 names the stopped rank in one line: $out"
assert_match "$out" "ddp-restart: attempt 1 failed with exit code [0-9]+; first to fail: node1 \\(task 0: Exited with exit code 1\\)" \
  "the step ended when rank 0 did"
assert_match "$out" "ddp-restart: ddp-why: step $job\\.0: first failure: rank 0 on node1, Exited with exit code 1, at [^:]+:[^:]+:[^:]+: $verdict" \
  "ddp-restart shows rank 0's report of the stopped rank"
assert_match "$out" "Resuming training from snapshot at Epoch (21|31)[^0-9]" "resumed from the newest snapshot"
assert_contains "$out" "Final model saved at" "the restarted step trained to the end"
pass "a stopped rank is named at the timeout, the step ends and resumes from its snapshot"
