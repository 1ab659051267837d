#!/usr/bin/env bash
# srun --ddp in real container runtimes from Debian's packages, on 2 nodes x 2 tasks, with the cluster's image of
# this stack's own root (cluster.sh: DDP_CLUSTER_IMAGE): Charliecloud (srun --ddp ch-run IMAGE -- ...) and Slurm's
# OCI containers (srun --ddp --container=BUNDLE ..., oci.conf running rootless runc). In each: every task sees the
# contract ddp.so set and runs on the CPUs it chose (--ddp-verbose), a PyTorch Gloo all-reduce across the nodes,
# ddp-train with snapshots on the shared directory and a resume from them; ddp-doctor inside ch-run. Then bad input,
# each failing the step before training and leaving the snapshots as they were: an image and a bundle that do not
# exist, a snapshot directory the container does not mount (named with ch-run -b, by ddp-train and ddp-doctor).
# On Slurm 22.05, which writes a --container step's environment before any task starts, srun --ddp refuses
# --container in one line instead. Both runtimes need unprivileged user namespaces for the job user: checked first,
# skipped without.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=training_lib.sh
source "$(dirname "$0")/training_lib.sh"
# shellcheck source=container_lib.sh
source "$(dirname "$0")/container_lib.sh"
command -v ch-run >/dev/null || skip "Charliecloud is not installed (charliecloud-runtime)"
command -v runc >/dev/null || skip "runc is not installed"
userns_works || skip "the job user cannot create user namespaces here (ch-run and rootless runc need them): $USERNS_ERROR"
[ -x "${DDP_BUILD_DIR:-}/src/doctor/ddp-doctor" ] || skip "ddp-doctor is not built"
IMAGE=$DDP_CLUSTER_IMAGE
ALLREDUCE=$(stage "$(dirname "$0")/allreduce.py")
DOCTOR=$(stage "$DDP_BUILD_DIR/src/doctor/ddp-doctor")
TRAIN=(--workload seed --batch-size 64 --run-id containers)

# Slurm's OCI containers: oci.conf and the cluster's bundle, whose root is its image (oci_bundle.sh).
setup_oci() {
  BUNDLE=$DDP_CLUSTER_BUNDLE
  "$(dirname "$0")/oci_bundle.sh" "$DDP_CLUSTER_DIR/etc" "$BUNDLE" "$DDP_CLUSTER_SHARED" "$DDP_CLUSTER_USER"
  on_exit "rm -rf '$DDP_CLUSTER_DIR/etc/oci.conf' '$BUNDLE/config.json' /run/user/$(id -u "$DDP_CLUSTER_USER")"
}

# One runtime, PER_NODE tasks on each of the 2 nodes: PREFIX starts a command in its container (srun options and
# command words).
check_runtime() {
  local name=$1 per_node=$2 out dir world
  shift 2
  world=$((2 * per_node))
  local step=(--ntasks-per-node="$per_node" "$@") sum=$((world * (world + 1) / 2))
  out=$(view_tasks -- "${step[@]}") || fail "$name: the task view failed: $out"
  assert_eq "$world/$world" "$(tasks_right "$out" contract)" "$name: tasks whose contract is ddp.so's: $out"
  # The CPUs ddp.so bound each task to reach the program, except where the runtime resets the affinity of the
  # process it starts (runc since 1.2: every CPU of the container's cgroup); ddp-train then binds itself again.
  local reset=0
  if [ "$(tasks_right "$out")" != "$world/$world" ]; then
    if [ "$name" != oci ] || runc --version | grep -qE '^runc version 1\.[01]\.'; then
      fail "$name: tasks not on the CPUs ddp.so bound them to: $out"
    fi
    reset=1
  fi
  case $name in
    ch-run) assert_eq "$world" "$(grep -c '^task .* CH_RUNNING=Weird_Al_Yankovic ' <<<"$out")" "$name: tasks inside ch-run: $out" ;;
    oci) assert_eq "$world" "$(grep -c "^task .* SLURM_CONTAINER=$BUNDLE " <<<"$out")" "$name: tasks inside the bundle: $out" ;;
  esac
  # Inside a mount namespace of its own, not the node's.
  assert_eq 0 "$(grep -c "mntns=$(on_node node1 readlink /proc/self/ns/mnt)" <<<"$out")" "$name: the container's view"
  figure "$name contract" "$(tasks_right "$out" contract) tasks right, $(tasks_right "$out") with their CPUs; binding: $(grep -m1 '^ddp: rank 0 ' <<<"$out" | sed 's/.* | //')"

  out=$(run_on_cluster timeout 120 "${SRUN[@]}" --ddp -N2 "${step[@]}" /usr/bin/python3 "$ALLREDUCE" 2>&1) ||
    fail "$name: torch.distributed in the container failed: $out"
  assert_eq "$world" "$(grep -c "world=$world .* sum=$sum expected=$sum OK" <<<"$out")" "$name: Gloo all-reduce of $world ranks: $out"
  figure "$name allreduce" "$(grep -c ' OK$' <<<"$out")/$world ranks sum=$sum"

  dir=$TEST_DIR/$name
  install -d -o "$DDP_CLUSTER_USER" "$dir"
  out=$(run_on_cluster timeout 120 "${SRUN[@]}" --ddp -N2 --ddp-snapshot-dir="$dir/snapshots" "${step[@]}" \
    "$STAGED_TRAIN" "${TRAIN[@]}" --output "$dir/finalmodel.pt" 2 1 2>&1) || fail "$name: ddp-train failed: $out"
  assert_contains "$out" "Epoch 1 | Training snapshot saved at $dir/snapshots/snapshot-e000002-" "$name: a snapshot on the shared directory"
  assert_eq $((reset * 2)) "$(grep -c 'ddp-train: the container runtime reset the CPU binding srun --ddp chose' <<<"$out")" \
    "$name: ddp-train binds again, once per node, only where the runtime reset the binding: $out"
  assert_snapshots_load "$dir/snapshots"
  out=$(run_on_cluster timeout 120 "${SRUN[@]}" --ddp -N2 --ddp-snapshot-dir="$dir/snapshots" "${step[@]}" \
    "$STAGED_TRAIN" "${TRAIN[@]}" --output "$dir/finalmodel.pt" 3 1 2>&1) || fail "$name: ddp-train's resume failed: $out"
  assert_contains "$out" "Resuming training from snapshot at Epoch 2" "$name: the resume"
  assert_eq "$world" "$(grep -c '^\[CPU[0-3]\] Epoch 2 ' <<<"$out")" "$name: every rank trained epoch 2: $out"
  assert_not_contains "$out" "] Epoch 1 " "$name: no rank trained epoch 1 again"
  assert_contains "$out" "Epoch 2 | Training snapshot saved at $dir/snapshots/snapshot-e000003-" "$name: the resumed run's snapshot"
  figure "$name ddp-train" "$world ranks wrote snapshots for epochs 1-2 on the shared directory, resumed at epoch 2 and wrote epoch 3"
}

# ddp-doctor inside ch-run: what the container lets the run see.
check_doctor_in_container() {
  local out snap=$TEST_DIR/doctor-snap
  out=$(run_on_cluster timeout 120 "${SRUN[@]}" --ddp=gloo -N2 --ntasks-per-node=1 --ddp-snapshot-dir="$snap" \
    ch-run "$IMAGE" -- "$DOCTOR" --quick --timeout 10 --snapshot-size 1M 2>&1) || fail "ddp-doctor inside ch-run: $out"
  assert_match "$out" "container.runtime +OK +Charliecloud \(ch-run\)" "the doctor names the runtime: $out"
  assert_match "$out" "container.snapshot_dir +OK +present" "the doctor sees the prepared directory: $out"
  figure "ch-run ddp-doctor" "$(grep -E ' container\.' <<<"$out" | tr -s ' ' | paste -sd';' -); $(grep -m1 '^ddp-doctor: .* node(s)' <<<"$out")"
}

# --- bad input: each fails the step before training and leaves the snapshots as they were ----------------------
check_bad_input() {
  local snaps=$TEST_DIR/ch-run/snapshots before out
  before=$(cd "$snaps" && sha256sum -- *)
  # An image that does not exist: ch-run's own one line.
  assert_fails "ch-run with a missing image" run_on_cluster timeout 120 "${SRUN[@]}" --ddp -N2 --ntasks-per-node=2 \
    --ddp-snapshot-dir="$snaps" ch-run "$TEST_DIR/no-such-image" -- "$STAGED_TRAIN" "${TRAIN[@]}" 4 1
  assert_match "$FAILED_OUTPUT" "ch-run\[[0-9]+\]: error: .*no-such-image" "ch-run names the image: $FAILED_OUTPUT"
  figure "ch-run missing image" "$(grep -m1 'ch-run\[' <<<"$FAILED_OUTPUT")"
  # A bundle that does not exist: Slurm fails every task's launch ("Unspecified error"); srun --ddp says why first.
  if [ "$series" -ge 2302 ]; then
    assert_fails "srun --container with a missing bundle" run_on_cluster timeout 120 "${SRUN[@]}" --ddp -N2 \
      --ntasks-per-node=2 --container="$TEST_DIR/no-such-bundle" --ddp-snapshot-dir="$TEST_DIR/oci/snapshots" \
      "$STAGED_TRAIN" "${TRAIN[@]}" 4 1
    assert_contains "$FAILED_OUTPUT" "ddp: warning: --container=$TEST_DIR/no-such-bundle is not a directory on this host" \
      "srun --ddp's line"
    figure "oci missing bundle" "$(grep -v '^$' <<<"$FAILED_OUTPUT" | head -n 2 | paste -sd'|' -)"
  fi
  # The snapshot directory not mounted: ch-run -t gives the container a /tmp of its own, where the shared
  # directory is not; only the program's directory is bound in. ddp-train refuses before its first step.
  install -d -o "$DDP_CLUSTER_USER" "$TEST_DIR/bin"
  cp "$STAGED_TRAIN" "$DOCTOR" "$TEST_DIR/bin/"
  assert_fails "a snapshot directory ch-run does not mount" run_on_cluster timeout 120 "${SRUN[@]}" --ddp -N2 \
    --ntasks-per-node=2 --ddp-snapshot-dir="$snaps" ch-run -t -b "$TEST_DIR/bin" "$IMAGE" -- \
    "$TEST_DIR/bin/ddp-train" "${TRAIN[@]}" 4 1
  assert_contains "$FAILED_OUTPUT" "ddp-train: snapshot directory '$snaps' does not exist inside this container (Charliecloud (ch-run)), though srun --ddp created it on node" \
    "ddp-train's refusal"
  assert_contains "$FAILED_OUTPUT" "mount it into the container with ch-run -b SRC[:DST]" "the option named"
  assert_not_contains "$FAILED_OUTPUT" "Epoch 0" "no training"
  figure "ch-run -t snapshot dir not mounted" "$(grep -m1 'ddp-train: snapshot directory' <<<"$FAILED_OUTPUT")"
  assert_fails "ddp-doctor where the snapshot directory is not mounted" run_on_cluster timeout 120 "${SRUN[@]}" --ddp=gloo \
    -N2 --ntasks-per-node=1 --ddp-snapshot-dir="$snaps" ch-run -t -b "$TEST_DIR/bin" "$IMAGE" -- \
    "$TEST_DIR/bin/ddp-doctor" --quick --timeout 10 --snapshot-size 1M
  assert_match "$FAILED_OUTPUT" "container.snapshot_dir +FAIL +missing" "the doctor's row: $FAILED_OUTPUT"
  assert_eq "$before" "$(cd "$snaps" && sha256sum -- *)" "the snapshots after the refused steps"
}

# Slurm 22.05 writes a --container step's environment before any task starts (spank_plugin/slurm_versions.h): srun
# --ddp refuses the combination there in one line, before anything is launched.
check_oci_refused() {
  assert_fails "srun --ddp --container on Slurm 22.05" run_on_cluster timeout 120 "${SRUN[@]}" --ddp -N2 \
    --ntasks-per-node=1 --container="$BUNDLE" "$VIEW"
  assert_contains "$FAILED_OUTPUT" "ddp: --container on Slurm 22.05 writes the container's environment before any task starts" \
    "the refusal"
  assert_not_contains "$FAILED_OUTPUT" "task RANK=" "no task started"
  figure "oci on Slurm 22.05" "refused: $(grep -m1 -o 'ddp: --container on Slurm[^;]*' <<<"$FAILED_OUTPUT")"
}

series=$(run_on_cluster srun --version | grep -oE '[0-9]+\.[0-9]+' | head -n 1 | awk -F. '{printf "%d%02d", $1, $2}')
setup_oci
allocate
check_runtime ch-run 2 ch-run "$IMAGE" --
if [ "$series" -ge 2302 ]; then check_runtime oci 2 --container="$BUNDLE"; else check_oci_refused; fi
check_doctor_in_container
check_bad_input
pass "ch-run and srun --container (runc; refused on Slurm 22.05), 2 x 2: every task's contract and CPUs, Gloo all-reduce, ddp-train snapshots and resume, ddp-doctor inside; missing image and bundle, an unmounted snapshot directory refused before training"
