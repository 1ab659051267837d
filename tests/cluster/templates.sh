#!/usr/bin/env bash
# Every sbatch template runs to completion on the test cluster: ddp-train through ddp-restart and srun --ddp (one
# node, one node with several tasks, two nodes, the ParallelCluster p4d template on the test partition, two nodes
# in Charliecloud containers of the cluster's image with ddp-doctor first), and a torchrun-style Python script
# through python-ddp.sbatch. Each leaves its final model and snapshots behind.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=training_lib.sh
source "$(dirname "$0")/training_lib.sh"

# The nodes have 4 CPUs and 2 GPUs as Slurm sees them: the templates' GPU-sized requests are scaled down on the
# command line, with GPUs asked for in both of the ways users do.
declare -A jobs
jobs[single-gpu]=$(submit_template single-gpu.sbatch "$TEST_DIR/single-gpu" EPOCHS=3 SAVE_EVERY=1 -- \
  --gres=gpu:1 --cpus-per-task=2)
jobs[multi-gpu]=$(submit_template multi-gpu.sbatch "$TEST_DIR/multi-gpu" EPOCHS=3 SAVE_EVERY=1 -- \
  --gpus-per-node=2 --ntasks-per-node=2 --cpus-per-task=2 --ddp-verbose)
jobs[multi-node]=$(submit_template multi-node.sbatch "$TEST_DIR/multi-node" EPOCHS=3 SAVE_EVERY=1 -- \
  --gres=gpu:1 --cpus-per-task=2)
jobs[p4d-efa]=$(submit_template parallelcluster/p4d-efa.sbatch "$TEST_DIR/p4d-efa" EPOCHS=3 SAVE_EVERY=1 \
  TASKS_PER_NODE=2 TRAIN_ARGS="--width 64" -- --partition=ddp --gpus-per-node=2 --ntasks-per-node=2 --cpus-per-task=2 \
  --ddp=gloo)
# The container template with ch-run, where the job user may make user namespaces (Charliecloud needs them). Without
# GPUs (DEVICE=cpu): ddp-doctor runs first, and its gpu.visible rightly fails the test cluster's GPUs, which are
# device files with no GPU behind them.
with_container=0
if command -v ch-run >/dev/null && on_node node1 --user unshare --user true >/dev/null 2>&1; then
  with_container=1
  doctor=$(stage "$DDP_BUILD_DIR/src/doctor/ddp-doctor")
  jobs[multi-node-container]=$(submit_template multi-node-container.sbatch "$TEST_DIR/multi-node-container" EPOCHS=3 \
    SAVE_EVERY=1 RUNTIME=charliecloud IMAGE="$DDP_CLUSTER_IMAGE" SNAPSHOT_ROOT="$TEST_DIR/multi-node-container" \
    PREFLIGHT=1 DDP_DOCTOR="$doctor" DEVICE=cpu -- --gpus-per-node=0 --cpus-per-task=2)
else
  echo "templates: multi-node-container.sbatch not run: no ch-run, or no user namespaces for $DDP_CLUSTER_USER"
fi
script=$(stage "$DDP_SOURCE_DIR/runtime/bench/python_ddp.py")
jobs[python-ddp]=$(submit_template python-ddp.sbatch "$TEST_DIR/python-ddp" SCRIPT="$script" \
  SCRIPT_ARGS="--workload seed 2" PYTHON="$TORCH_PYTHON" -- --gpus-per-node=1 --cpus-per-task=2)
# Without GPUs a template stops before training, in one line naming both ways to ask for them.
jobs[no-gpus]=$(submit_template single-gpu.sbatch "$TEST_DIR/no-gpus" EPOCHS=3 -- --gpus-per-node=0 --cpus-per-task=1)

for name in single-gpu multi-gpu multi-node p4d-efa; do
  dir=$TEST_DIR/$name
  expect_completed "$dir" "${jobs[$name]}"
  out=$(job_output "$dir" "${jobs[$name]}")
  assert_contains "$out" "Final model saved at finalmodel.pt" "$name: the final model"
  assert_contains "$out" "Epoch 2 | Training snapshot saved at $dir/snapshots/snapshot-e000003-" "$name: snapshots"
  assert_snapshots_load "$dir/snapshots"
done
assert_eq 1 "$(job_output "$TEST_DIR/single-gpu" "${jobs[single-gpu]}" | grep -c '^\[CPU0\] Epoch 0 ')" "single-gpu: one task"
assert_eq 2 "$(job_output "$TEST_DIR/multi-gpu" "${jobs[multi-gpu]}" | grep -c '^\[CPU[01]\] Epoch 0 ')" "multi-gpu: two tasks"
assert_eq 2 "$(job_output "$TEST_DIR/multi-gpu" "${jobs[multi-gpu]}" | grep -c '^ddp: rank [01] .* OMP_NUM_THREADS=2 ')" \
  "multi-gpu: the job's --cpus-per-task reaches the step: $(job_output "$TEST_DIR/multi-gpu" "${jobs[multi-gpu]}" | grep "^ddp:")"
assert_eq 4 "$(job_output "$TEST_DIR/p4d-efa" "${jobs[p4d-efa]}" | grep -c '^\[CPU[0-3]\] Epoch 0 ')" "p4d-efa: four tasks"
if [ "$with_container" = 1 ]; then
  dir=$TEST_DIR/multi-node-container
  expect_completed "$dir" "${jobs[multi-node-container]}"
  out=$(job_output "$dir" "${jobs[multi-node-container]}")
  assert_contains "$out" "Epoch 2 | Training snapshot saved at $dir/snapshots/snapshot-e000003-" "multi-node-container: snapshots"
  assert_snapshots_load "$dir/snapshots"
  assert_match "$out" "container.runtime +OK +Charliecloud \(ch-run\)" "multi-node-container: ddp-doctor ran in ch-run"
fi

expect_completed "$TEST_DIR/python-ddp" "${jobs[python-ddp]}"
out=$(job_output "$TEST_DIR/python-ddp" "${jobs[python-ddp]}")
assert_match "$out" "Trained .*: [0-9]+ samples/s" "python-ddp: the script trained over 2 nodes"
assert_eq FAILED "$(wait_job "${jobs[no-gpus]}")" "a template without GPUs"
assert_contains "$(job_output "$TEST_DIR/no-gpus" "${jobs[no-gpus]}")" \
  "single-gpu.sbatch: the job has no GPUs: submit it with --gpus-per-node=1 or --gres=gpu:1" "a template without GPUs"
assert_not_contains "$(job_output "$TEST_DIR/no-gpus" "${jobs[no-gpus]}")" "Epoch" "a template without GPUs"
# No template asks for GPUs itself, so either way of asking for them is accepted, on Slurm 26.05 too (which refuses
# --gres=gpu beside --gpus-per-node, wherever each comes from).
for template in single-gpu.sbatch multi-gpu.sbatch multi-node.sbatch multi-node-container.sbatch python-ddp.sbatch \
  parallelcluster/p4d-efa.sbatch; do
  for gpus in --gres=gpu:1 --gpus-per-node=1; do
    out=$(run_on_cluster sbatch --test-only --partition=ddp -N1 --ntasks-per-node=1 --cpus-per-task=1 "$gpus" \
      "$TEMPLATES/$template" 2>&1) || fail "$template with $gpus was refused: $out"
  done
done
pass "single-gpu, multi-gpu, multi-node, p4d-efa, python-ddp and (with ch-run: $with_container) multi-node-container" \
  "templates completed with GPUs asked for either way"
