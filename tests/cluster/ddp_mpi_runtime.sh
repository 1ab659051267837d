#!/usr/bin/env bash
# ddp-train over the MPI process group across the namespace nodes: `srun --mpi=pmix --ddp=mpi -N2` trains to
# completion (OpenMPI over TCP between the nodes, rank and size from PMIx) and ends with the model a Gloo run
# (`srun --ddp=gloo`) ends with; without --mpi=pmix OpenMPI cannot start, and ddp-train says so first; a rank
# killed beside its peer on one node ends the step at once, also without srun's kill-on-bad-exit.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=training_lib.sh
source "$(dirname "$0")/training_lib.sh"
# Small buckets: several all-reduces per step, overlapped with backward.
args=(--workload mlp --width 64 --samples 512 --batch-size 16 --momentum 0.9 --lr 0.01 --bucket-cap-mb 0.01 3 0)

# train_on_cluster NAME SRUN_OPTION...: ddp-train on 2 nodes x 1 task, its model in $TEST_DIR/NAME/final.pt.
train_on_cluster() {
  local name=$1
  shift
  install -d -o "$DDP_CLUSTER_USER" "$TEST_DIR/$name"
  run_on_cluster timeout 120 srun -t 3 -N2 --ntasks-per-node=1 --ddp-verbose "$@" "$STAGED_TRAIN" \
    --snapshot-dir "$TEST_DIR/$name" --output "$TEST_DIR/$name/final.pt" "${args[@]}" 2>&1
}

assert_fails "srun --ddp=mpi without --mpi=pmix" train_on_cluster lone --mpi=none --ddp=mpi
assert_contains "$FAILED_OUTPUT" "ddp-train: backend mpi under srun needs Slurm's PMIx plugin to start MPI; launch with srun --mpi=pmix --ddp=mpi" \
  "srun without PMIx is refused"
# OpenMPI 5 and later start only under PMIx: Debian 14's Slurm 26.05, built without it, cannot run MPI steps.
run_on_cluster srun --mpi=list 2>&1 | grep -qw pmix ||
  skip "the refusal passed; the rest needs Slurm's mpi/pmix plugin, which this Slurm lacks (srun --mpi=list)"

out=$(train_on_cluster mpi --mpi=pmix --ddp=mpi) || fail "srun --mpi=pmix --ddp=mpi ddp-train failed: $out"
assert_eq 2 "$(grep -c '^ddp: rank [01] .*DDP_BACKEND=mpi' <<<"$out")" "both tasks get the mpi hint: $out"
assert_contains "$out" "[CPU0] Epoch 2 | Batchsize: 16 | Steps: 16" "rank 0 trained"
assert_contains "$out" "[CPU1] Epoch 2 | Batchsize: 16 | Steps: 16" "rank 1 trained"
assert_contains "$out" "Final model saved at $TEST_DIR/mpi/final.pt" "the final model"

out=$(train_on_cluster gloo --ddp=gloo) || fail "srun --ddp=gloo ddp-train failed: $out"
assert_same_models "$TEST_DIR/gloo/final.pt" "$TEST_DIR/mpi/final.pt" close

# Two MPI ranks on one node talk through shared memory, where nothing tells one that the other died: when one is
# killed, the other must not wait for its --timeout (600 s here). Without srun's kill-on-bad-exit, what ends the step is
# the survivor's watchdog, which watches its peer's pidfd (rank 0's message), or OpenMPI, whichever sees it first.
log=$TEST_DIR/killed.log
install -d -o "$DDP_CLUSTER_USER" "$TEST_DIR/killed"
# A run that ends by itself within a minute or two, in an allocation that Slurm ends after 3 minutes and that the test
# cancels when it ends: an srun killed with the test (CTest's timeout) would otherwise leave it running.
name=ddp-mpi-killed-$$
# shellcheck disable=SC2016  # expanded at exit
on_exit 'run_on_cluster scancel --name="$name" >/dev/null 2>&1 || true'
run_on_cluster timeout 120 srun -t 3 -J "$name" -N1 -n2 --kill-on-bad-exit=0 --mpi=pmix --ddp=mpi "$STAGED_TRAIN" \
  --timeout 600 --snapshot-dir "$TEST_DIR/killed" --output "$TEST_DIR/killed/final.pt" --workload mlp --width 64 \
  1000 0 >"$log" 2>&1 &
step=$!
end=$((SECONDS + 100))
until grep -q '^Epoch 1 | Loss' "$log"; do
  [ "$SECONDS" -lt "$end" ] || fail "the one-node MPI run did not reach epoch 1 within 100 s: $(cat "$log")"
  sleep 0.2
done
# Rank 1 of this run: not a ddp-train of a cluster another suite runs in a root. Looked for again for a few seconds
# (CI once found none just after epoch 1, with no more to say: the failure now shows the run's output and processes).
rank=""
for _ in $(seq 50); do
  rank=$(ddp_train_pids "SLURM_JOB_NAME=$name" RANK=1)
  [ -z "$rank" ] || break
  sleep 0.2
done
[ -n "$rank" ] || fail "no rank 1 of the one-node MPI run to kill; the job user's processes:
$("$CLUSTER_SH" pgrep -a -u "$DDP_CLUSTER_USER" || true)
the run's output: $(cat "$log")"
killed_at=$(date +%s.%N)
kill -KILL "${rank%%$'\n'*}"
status=0
wait "$step" || status=$?
ended_in=$(printf %.2f "$(echo "$(date +%s.%N) - $killed_at" | bc)")
[ "$status" -ne 0 ] || fail "the step succeeded although a rank was killed: $(cat "$log")"
[ "$status" -ne 124 ] || fail "the step had not ended 120 s after it started, a rank killed: $(cat "$log")"
[ "$(echo "$ended_in < 30" | bc)" -eq 1 ] || fail "the step took $ended_in s to end after a rank was killed"
assert_not_contains "$(cat "$log")" "has not completed within 600 s" "no rank waited for its timeout"
if grep -q "rank 0: rank 1 on this node ended while this rank waited in MPI " "$log"; then
  echo "ended $ended_in s after the kill by rank 0's watchdog: $(grep 'rank 1 on this node ended' "$log")"
else
  echo "ended $ended_in s after the kill by OpenMPI or srun, before rank 0's watchdog looked (every 200 ms)"
fi
grep -E '^(srun|slurmstepd)' "$log" || true

pass "ddp-train over MPI (srun --mpi=pmix --ddp=mpi) on 2 nodes ends with Gloo's model"
