#!/usr/bin/env bash
# What container runtimes that start before the program do to the contract, on 2 nodes x 2 tasks:
#  - pyxis with enroot's pytorch hook, through pyxis_standin.so (what pyxis's task_init and the hook do to a task,
#    Debian packages neither) with an image that sets PYTORCH_VERSION:
#      listed before ddp.so (the install scripts' order): every task sees ddp.so's values, ddp.so runs in the
#      container's view (a mount namespace with its own /tmp and an empty /sys), binds from the node's hardware as
#      without a container, prepares the snapshot directory there (a Gloo all-reduce; ddp-train's snapshots on the
#      shared directory, mounted in, and a resume); the image's own OMP_NUM_THREADS counts as the user's; a
#      snapshot directory not mounted in is refused before the program starts, naming --container-mounts;
#      listed after ddp.so: a step that asks for a pyxis container is refused before it starts, naming the order;
#      a container plugin ddp.so cannot recognise (the stand-in started by a variable) replaces MASTER_PORT, and
#      ddp-train refuses the replaced contract;
#    an image that does not exist fails the step (the plugin's own line).
#  - apptainer exec --cleanenv, emulated by cleanenv_exec.sh (Apptainer is not packaged by Debian either): with
#    --ddp-cleanenv=apptainer every task sees the contract through APPTAINERENV_ names alone; without it,
#    ddp-train refuses the cleared contract naming the option.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=training_lib.sh
source "$(dirname "$0")/training_lib.sh"
# shellcheck source=container_lib.sh
source "$(dirname "$0")/container_lib.sh"
[ -n "${DDP_PYXIS_STANDIN:-}" ] || skip "pyxis_standin.so is not built"
userns_works || skip "the job user cannot create user namespaces here (the stand-in's container view needs them): $USERNS_ERROR"
STANDIN=$(stage "$DDP_PYXIS_STANDIN")
CLEANENV=$(stage "$(dirname "$0")/cleanenv_exec.sh")
ALLREDUCE=$(stage "$(dirname "$0")/allreduce.py")
TRAIN=(--workload seed --batch-size 64 --run-id containers)
# The test's directory and the job user's failure reports (DDP_LOG_DIR), mounted into the container.
install -d -o "$DDP_CLUSTER_USER" -m 0700 "$DDP_CLUSTER_SHARED/ddp-logs"
MOUNTS=$TEST_DIR,$DDP_CLUSTER_SHARED/ddp-logs
PYXIS=(--container-image=pytorch --container-mounts="$MOUNTS")

pyxis_first() {
  local out plain dir=$TEST_DIR/pyxis-first
  set_plugstack "required $STANDIN" "required $DDP_CLUSTER_PLUGIN"
  plain=$(view_tasks --) || fail "without a container: $plain"
  out=$(view_tasks "${PYXIS[@]}" --) || fail "pyxis first: $out"
  assert_eq 4/4 "$(tasks_right "$out")" "pyxis first: tasks whose contract and CPUs are ddp.so's: $out"
  assert_eq 4 "$(grep -c '^task .* PYTORCH_VERSION=2.6.0 ' <<<"$out")" "pyxis first: the image's environment is in: $out"
  assert_eq 4 "$(grep -c '^ddp: rank .* view=container$' <<<"$out")" "pyxis first: ddp.so ran in the container's view: $out"
  # The node's hardware, not the container's empty /sys: the same CPUs as the step without a container.
  assert_eq "$(grep '^ddp: rank' <<<"$plain" | sed 's/.* cpus=\([^ ]*\) .*/\1/' | sort)" \
    "$(grep '^ddp: rank' <<<"$out" | sed 's/.* cpus=\([^ ]*\) .*/\1/' | sort)" "pyxis first: CPUs as without a container"
  figure "pyxis first contract" "$(tasks_right "$out") tasks right"

  out=$(run_on_cluster timeout 120 "${SRUN[@]}" --ddp -N2 --ntasks-per-node=2 "${PYXIS[@]}" /usr/bin/python3 "$ALLREDUCE" 2>&1) ||
    fail "pyxis first: torch.distributed failed: $out"
  assert_eq 4 "$(grep -c 'world=4 .* sum=10 expected=10 OK' <<<"$out")" "pyxis first: Gloo all-reduce: $out"
  figure "pyxis first allreduce" "$(grep -c ' OK$' <<<"$out")/4 ranks sum=10"

  install -d -o "$DDP_CLUSTER_USER" "$dir"
  out=$(run_on_cluster timeout 120 "${SRUN[@]}" --ddp -N2 --ntasks-per-node=2 "${PYXIS[@]}" --ddp-snapshot-dir="$dir/snapshots" \
    "$STAGED_TRAIN" "${TRAIN[@]}" --output "$dir/finalmodel.pt" 2 1 2>&1) || fail "pyxis first: ddp-train failed: $out"
  assert_snapshots_load "$dir/snapshots"
  out=$(run_on_cluster timeout 120 "${SRUN[@]}" --ddp -N2 --ntasks-per-node=2 "${PYXIS[@]}" --ddp-snapshot-dir="$dir/snapshots" \
    "$STAGED_TRAIN" "${TRAIN[@]}" --output "$dir/finalmodel.pt" 3 1 2>&1) || fail "pyxis first: ddp-train's resume failed: $out"
  assert_contains "$out" "Resuming training from snapshot at Epoch 2" "pyxis first: the resume"
  assert_eq 4 "$(grep -c '^\[CPU[0-3]\] Epoch 2 ' <<<"$out")" "pyxis first: every rank trained epoch 2: $out"
  assert_not_contains "$out" "] Epoch 1 " "pyxis first: no rank trained epoch 1 again"
  assert_contains "$out" "Epoch 2 | Training snapshot saved at $dir/snapshots/snapshot-e000003-" "pyxis first: resumed run's snapshot"
  figure "pyxis first ddp-train" "snapshots for epochs 1-2 in the mounted shared directory, resumed at epoch 2, epoch 3 saved"

  # An image's own ENV OMP_NUM_THREADS is the user's: it stands.
  out=$(view_tasks --container-image=pytorch-omp --container-mounts="$MOUNTS" --) || fail "pytorch-omp: $out"
  assert_eq 4 "$(grep -c '^task .* OMP_NUM_THREADS=3 ' <<<"$out")" "the image's OMP_NUM_THREADS: $out"
  assert_eq 4 "$(grep -c '^ddp: rank .* OMP_NUM_THREADS=3\[user\]' <<<"$out")" "ddp.so keeps it as the user's: $out"

  # Bad input: a snapshot directory not mounted into the container (only the programs' directory is), and an
  # image that does not exist. Neither starts the program.
  install -d -o "$DDP_CLUSTER_USER" "$TEST_DIR/bin"
  cp "$VIEW" "$TEST_DIR/bin/"
  assert_fails "a snapshot directory the container does not mount" run_on_cluster timeout 120 "${SRUN[@]}" --ddp -N2 \
    --ntasks-per-node=2 --container-image=pytorch --container-mounts="$TEST_DIR/bin" \
    --ddp-snapshot-dir="$TEST_DIR/unmounted/snapshots" "$TEST_DIR/bin/print_task_view.sh"
  assert_contains "$FAILED_OUTPUT" "ddp: snapshot directory '$TEST_DIR/unmounted/snapshots' is not mounted into the container: '$TEST_DIR' (the nearest part of it that exists) lies on '/tmp', a file system the container made for itself" \
    "ddp.so's refusal in the container's view"
  assert_contains "$FAILED_OUTPUT" "with srun --container-mounts=SRC:DST" "the option named"
  assert_not_contains "$FAILED_OUTPUT" "task RANK=" "no program started"
  [ ! -e "$TEST_DIR/unmounted" ] || fail "the refused directory was created on the node"
  figure "pyxis first snapshot dir not mounted" "$(grep -m1 'ddp: snapshot directory' <<<"$FAILED_OUTPUT")"
  assert_fails "an image that does not exist" run_on_cluster timeout 120 "${SRUN[@]}" --ddp -N2 --ntasks-per-node=2 \
    --container-image=no-such-image "$VIEW"
  assert_contains "$FAILED_OUTPUT" "pyxis_standin: image 'no-such-image' does not exist" "the plugin's line"
  assert_not_contains "$FAILED_OUTPUT" "task RANK=" "no program started"
}

ddp_first() {
  local out port job
  set_plugstack "required $DDP_CLUSTER_PLUGIN" "required $STANDIN"
  assert_fails "a pyxis container after ddp.so" run_on_cluster timeout 120 "${SRUN[@]}" --ddp -N2 --ntasks-per-node=2 "${PYXIS[@]}" "$VIEW"
  assert_contains "$FAILED_OUTPUT" "ddp: --container-image is handled by a container plugin that plugstack.conf lists after ddp.so (pyxis)" \
    "ddp.so's refusal"
  assert_contains "$FAILED_OUTPUT" "list ddp.so after pyxis in plugstack.conf" "the fix"
  assert_eq 1 "$(grep -c 'ddp: --container-image is handled' <<<"$FAILED_OUTPUT")" "one line for the step: $FAILED_OUTPUT"
  assert_not_contains "$FAILED_OUTPUT" "task RANK=" "no program started"
  figure "ddp.so first, --container-image" "refused: $(grep -m1 -o 'ddp: --container-image[^;]*' <<<"$FAILED_OUTPUT")"
  # Steps without a container are not concerned by the order.
  out=$(view_tasks --) || fail "ddp.so first, no container: $out"
  assert_eq 4/4 "$(tasks_right "$out")" "ddp.so first without a container: $out"

  # A container plugin ddp.so cannot recognise: the hook's port replaces ddp.so's, never silently.
  out=$(run_on_cluster env STANDIN_CONTAINER_IMAGE=pytorch timeout 120 "${SRUN[@]}" --ddp --ddp-verbose -N2 --ntasks-per-node=2 \
    --container-mounts="$MOUNTS" "$VIEW" 2>&1) || fail "an unrecognised container plugin after ddp.so: $out"
  job=$(grep -m1 -o 'TORCHELASTIC_RUN_ID=[0-9]*' <<<"$out" | cut -d= -f2)
  port=$((job % 4536 + 61000))
  assert_eq 4 "$(grep -c "^task .* MASTER_PORT=$port " <<<"$out")" "enroot's hook's port in every task: $out"
  assert_eq 0/4 "$(tasks_right "$out")" "tasks whose contract stood"
  figure "unrecognised plugin after ddp.so" "$(tasks_right "$out") tasks right (MASTER_PORT=$port, enroot's hook's)"
  assert_fails "ddp-train under a replaced contract" run_on_cluster env STANDIN_CONTAINER_IMAGE=pytorch timeout 120 \
    "${SRUN[@]}" --ddp -N2 --ntasks-per-node=2 --container-mounts="$MOUNTS" "$STAGED_TRAIN" "${TRAIN[@]}" 2 1
  assert_match "$FAILED_OUTPUT" "ddp-train: MASTER_PORT=6[0-9]+ in this program, but srun --ddp set MASTER_PORT=[0-9]+ \(something that ran after ddp.so replaced them: this image sets PYTORCH_VERSION" \
    "ddp-train's refusal: $FAILED_OUTPUT"
  assert_not_contains "$FAILED_OUTPUT" "Epoch 0" "no training"
  figure "unrecognised plugin after ddp.so, ddp-train" "$(grep -m1 -o 'ddp-train: MASTER_PORT=[^(]*' <<<"$FAILED_OUTPUT")"
}

cleanenv() {
  local out
  set_plugstack "required $DDP_CLUSTER_PLUGIN"
  out=$(view_tasks --ddp-cleanenv=apptainer -- "$CLEANENV") || fail "--ddp-cleanenv=apptainer: $out"
  assert_eq 4/4 "$(tasks_right "$out")" "the contract through APPTAINERENV_ names: $out"
  assert_eq 4 "$(grep -c '^task .* APPTAINER_CONTAINER=/' <<<"$out")" "in the emulated --cleanenv: $out"
  figure "apptainer --cleanenv with --ddp-cleanenv=apptainer" "$(tasks_right "$out") tasks right"
  out=$(view_tasks -- "$CLEANENV") || fail "--cleanenv without the option: $out"
  assert_eq 0/4 "$(tasks_right "$out")" "without --ddp-cleanenv nothing gets in: $out"
  assert_fails "ddp-train under --cleanenv without the option" run_on_cluster timeout 120 "${SRUN[@]}" --ddp -N2 \
    --ntasks-per-node=2 "$CLEANENV" "$STAGED_TRAIN" "${TRAIN[@]}" 2 1
  assert_contains "$FAILED_OUTPUT" "but none reached this program: apptainer/singularity exec --cleanenv passes only APPTAINERENV_ names" \
    "ddp-train's refusal"
  assert_contains "$FAILED_OUTPUT" "run the step with srun --ddp-cleanenv=apptainer" "the option named"
  assert_not_contains "$FAILED_OUTPUT" "Epoch 0" "no training"
  figure "apptainer --cleanenv without the option" "$(grep -m1 -o 'ddp-train: srun --ddp set [^:]*: ' <<<"$FAILED_OUTPUT")..."
}

allocate
pyxis_first
ddp_first
cleanenv
pass "pyxis stand-in before ddp.so: 4/4 right, all-reduce, snapshots and resume, unmounted snapshot directory and missing image refused; after it: refused, or an unrecognised plugin's port named by ddp-train; --cleanenv: 4/4 with --ddp-cleanenv=apptainer, refused without"
