#!/usr/bin/env bash
# Security and data safety on a real Slurm, each case as the attack or the fault itself:
#   - the job's HWLOC_XMLFILE is /dev/zero, a FIFO or a 100 MB file: the step runs with the real topology and
#     slurmstepd's memory stays flat (its peak RSS, read by the task from /proc/$PPID, is printed for the record);
#   - another user pre-created the snapshot directory 0777: the step is refused with one line; a fresh one is
#     created by the task, as the user, mode 0700;
#   - a --ddp job has one key for all its steps, another job another key, and derived ports follow it;
#   - a --ddp job has one instance (the run of ddp-train) for all its steps, kept by a requeue, another job another;
#   - "optional" in plugstack.conf keeps steps without --ddp running when ddp.so is missing;
#   - the snapshot directory's file system hangs (ext4 frozen with fsfreeze in node1's mount namespace): the step
#     fails at the admin's deadline with one line, and the node goes on running steps.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
[ -n "$DDP_PLUGIN" ] || skip "the plugin is not built"

# shellcheck disable=SC2016  # expanded by the task's shell
peak_rss='echo "vmhwm=$(sed -n "s/^VmHWM:[[:space:]]*\([0-9]*\) kB/\1/p" /proc/$PPID/status)"'

peak_of() { sed -n 's/^vmhwm=\([0-9]*\)$/\1/p' <<<"$1" | head -n 1; }

check_hwloc_xmlfile() {
  local out base fifo big value peak figures=""
  # Once without, to fill the topology cache and learn what a step's slurmstepd needs.
  run_on_cluster srun --ddp -N1 -w node1 -n1 true
  out=$(run_on_cluster srun --ddp --ddp-verbose -N1 -w node1 -n1 sh -c "$peak_rss" 2>&1)
  base=$(peak_of "$out")
  [ -n "$base" ] || fail "no peak RSS of slurmstepd in: $out"
  fifo=$TEST_DIR/topology.fifo
  big=$TEST_DIR/topology-100M.xml
  mkfifo -m 0644 "$fifo"
  { echo '<?xml version="1.0"?><topology version="2.0">'; head -c 100M /dev/zero | tr '\0' ' '; } >"$big"
  chown "$DDP_CLUSTER_USER" "$fifo" "$big"
  for value in /dev/zero "$fifo" "$big"; do
    # Before the fix: /dev/zero grew slurmstepd by gigabytes, the FIFO blocked the step for ever, the file cost
    # its size. timeout only bounds a regression.
    out=$(run_on_cluster env HWLOC_XMLFILE="$value" timeout 120 srun --ddp --ddp-verbose -N1 -w node1 -n1 \
      sh -c "$peak_rss" 2>&1) || fail "HWLOC_XMLFILE=$value: the step failed: $out"
    assert_not_contains "$out" "not bound: topology from" "HWLOC_XMLFILE=$value: the topology is this system's"
    assert_contains "$out" "cpus=" "HWLOC_XMLFILE=$value: the task was placed"
    peak=$(peak_of "$out")
    [ -n "$peak" ] || fail "no peak RSS of slurmstepd in: $out"
    [ "$peak" -le $((base + 8192)) ] ||
      fail "HWLOC_XMLFILE=$value: slurmstepd peaked at $peak kB, $((peak - base)) kB above a plain step ($base kB)"
    figures+=" $(basename "$value")=${peak}kB"
  done
  echo "slurmstepd peak RSS: plain step ${base}kB;$figures"
  # The admin's topology_xml is how a saved export is used (ddp_binding.sh checks the plan it gives).
}

check_planted_snapshot_dir() {
  local scratch=$TEST_DIR/scratch planted out
  mkdir -m 1777 "$scratch"
  planted=$scratch/ddp-next
  mkdir -m 0777 "$planted"
  chown 65533:65533 "$planted"
  chmod 0777 "$planted"
  assert_fails "a directory another user made" run_on_cluster srun --ddp --ddp-snapshot-dir="$planted" -N1 -n2 true
  assert_contains "$FAILED_OUTPUT" "ddp: snapshot directory '$planted' is owned by uid 65533, not by you (uid $(id -u "$DDP_CLUSTER_USER")): its owner could read, replace or delete your snapshots; use a directory of your own (--ddp-snapshot-dir)" \
    "the refusal"
  assert_eq 1 "$(grep -c 'ddp: ' <<<"$FAILED_OUTPUT")" "one line: $FAILED_OUTPUT"
  out=$(run_on_cluster srun --ddp --ddp-snapshot-dir="$scratch/ddp-%j" -N2 -n2 printenv DDP_SNAPSHOT_DIR | sort -u)
  assert_eq "$DDP_CLUSTER_USER 700" "$(stat -c '%U %a' "$out")" "made by the task, as the user, private"
}

check_job_key() {
  local out keys job
  out=$(run_on_cluster srun --ddp --resv-ports=0 -N2 -n2 sh -c 'echo "$DDP_JOB_KEY $MASTER_PORT"' | sort -u)
  assert_eq 1 "$(wc -l <<<"$out")" "one key and one port for the tasks of a step: $out"
  assert_match "$out" "^[0-9a-f]{32} 2[0-9]{4}$" "a 32-digit key and a derived port"
  # The derived port is the key's place in port_range (20000-29999), step 0.
  assert_eq "$((20000 + 16#${out:0:8} % 10000))" "${out#* }" "the port follows the key"
  job=$(submit -N2 --ntasks-per-node=1 --ddp --wrap "
    srun --ddp --resv-ports=0 -N2 -n2 sh -c 'echo step \$SLURM_STEP_ID \$DDP_JOB_KEY \$MASTER_PORT'
    srun --ddp --resv-ports=0 -N2 -n2 sh -c 'echo step \$SLURM_STEP_ID \$DDP_JOB_KEY \$MASTER_PORT'")
  assert_eq COMPLETED "$(wait_job "$job")" "state of job $job"
  keys=$(sed -n 's/^step [0-9]* \([0-9a-f]*\) .*/\1/p' "$TEST_DIR/slurm-$job.out" | sort -u)
  assert_eq 1 "$(wc -l <<<"$keys")" "every step of a job has the job's key: $(cat "$TEST_DIR/slurm-$job.out")"
  [ "$keys" != "${out%% *}" ] || fail "two jobs got the same key"
  assert_eq 2 "$(sed -n 's/^step [0-9]* [0-9a-f]* //p' "$TEST_DIR/slurm-$job.out" | sort -u | wc -l)" \
    "the job's two steps have different ports"
}

# A --ddp job's instance (DDP_JOB_INSTANCE: ddp-train's run is the job id and it) is the same in every step and after
# a requeue, and another job's differs: a job that reuses a job id (a rebuilt cluster) is not the old job's run. A
# job made without --ddp has none, and an srun --ddp inside it makes none (it would be the step's).
check_job_instance() {
  local out job instances script
  out=$(run_on_cluster srun --ddp -N2 -n2 printenv DDP_JOB_INSTANCE | sort -u)
  assert_match "$out" '^[0-9a-f]{12}$' "one 12-digit instance for the tasks of srun --ddp"
  # shellcheck disable=SC2016  # expanded by the batch script
  script='echo "attempt ${SLURM_RESTART_COUNT:-0} $DDP_JOB_INSTANCE $(srun --ddp -N1 -n1 printenv DDP_JOB_INSTANCE)"
    [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ] || scontrol requeue "$SLURM_JOB_ID"'
  job=$(submit -N1 --ddp --requeue --open-mode=append -o "$TEST_DIR/instance-%j.out" --wrap "$script")
  assert_eq COMPLETED "$(wait_job "$job" 180)" "state of job $job"
  out=$(cat "$TEST_DIR/instance-$job.out")
  # The script's own lines: slurmstepd adds one of its own ("CANCELLED ... DUE TO JOB REQUEUE") where the requeue
  # finds the first attempt still running.
  assert_match "$(grep '^attempt' <<<"$out")" "attempt 0 [0-9a-f]{12} [0-9a-f]{12}"$'\n'"attempt 1 [0-9a-f]{12} [0-9a-f]{12}" \
    "the job ran, was requeued and ran again: $out"
  instances=$(grep '^attempt' <<<"$out" | cut -d' ' -f3- | tr ' ' '\n' | sort -u)
  assert_eq 1 "$(wc -l <<<"$instances")" "one instance in the batch script and its step, before and after the requeue: $out"
  [ "$instances" != "$(run_on_cluster srun --ddp -N1 -n1 printenv DDP_JOB_INSTANCE)" ] || fail "two jobs got the same instance"
  # shellcheck disable=SC2016  # expanded by the task
  job=$(submit -N1 -o "$TEST_DIR/no-instance-%j.out" --wrap 'srun --ddp -N1 -n1 sh -c "echo [\${DDP_JOB_INSTANCE:-none}]"')
  assert_eq COMPLETED "$(wait_job "$job")" "state of job $job"
  assert_eq "[none]" "$(cat "$TEST_DIR/no-instance-$job.out")" "a job made without --ddp has no instance"
}

check_hung_snapshot_storage() {
  local mnt=$TEST_DIR/frozen image=$TEST_DIR/frozen.img
  command -v mkfs.ext4 >/dev/null && command -v fsfreeze >/dev/null || skip "no mkfs.ext4 or fsfreeze"
  mkdir "$mnt"
  truncate -s 16M "$image"
  mkfs.ext4 -q "$image"
  # Only node1 sees the mount: it is made in node1's mount namespace, and undone there at exit.
  on_node node1 mount -o loop "$image" "$mnt" || skip "no loop device here"
  on_exit "'$CLUSTER_SH' node node1 sh -c 'fsfreeze -u \"$mnt\" 2>/dev/null; umount -l \"$mnt\"' || true"
  chown "$DDP_CLUSTER_USER" "$image"
  on_node node1 chown "$DDP_CLUSTER_USER" "$mnt"
  on_node node1 fsfreeze -f "$mnt"
  set_plugstack "required $DDP_CLUSTER_PLUGIN snapshot_dir_timeout=2"
  local abandoned
  abandoned=$(grep -c 'Abandoning IO' "$DDP_CLUSTER_LOGS/slurmd-node1.log" || true)
  assert_fails "a hung snapshot file system" run_on_cluster timeout 120 srun --ddp -w node1 -N1 -n2 \
    --ddp-snapshot-dir="$mnt/snapshots" true
  assert_contains "$FAILED_OUTPUT" "ddp: snapshot directory '$mnt/snapshots' did not answer within 2 s: its file system hangs on this node; check the mount, or use another directory (--ddp-snapshot-dir) (on node1)" \
    "the deadline's message"
  assert_eq 1 "$(grep -c 'ddp: ' <<<"$FAILED_OUTPUT")" "one line: $FAILED_OUTPUT"
  # The stuck check holds nothing of the task's: its output pipes closed with it, and the step ended with it.
  assert_eq "$abandoned" "$(grep -c 'Abandoning IO' "$DDP_CLUSTER_LOGS/slurmd-node1.log" || true)" \
    "slurmstepd did not wait for output the stuck check held"
  # slurmd and the next steps on node1 are not held up by the hung file system.
  assert_eq node1 "$(run_on_cluster timeout 60 srun --ddp -w node1 -N1 -n1 hostname)" "node1 runs the next step"
  on_node node1 fsfreeze -u "$mnt"
}

# Plugstack modes: "required" in plugstack.conf makes a missing ddp.so break every step; "optional" keeps the
# steps without --ddp running and refuses --ddp.
check_plugstack_modes() {
  set_plugstack "optional /nonexistent/ddp.so"
  run_on_cluster srun -N2 -n2 true || fail "optional: a missing ddp.so broke a step without --ddp"
  assert_fails "--ddp where ddp.so is missing" run_on_cluster srun --ddp -N1 true
  set_plugstack "required /nonexistent/ddp.so"
  assert_fails "required and missing: every step fails" run_on_cluster srun -N1 true
  set_plugstack "required $DDP_CLUSTER_PLUGIN"
}

check_hwloc_xmlfile
check_planted_snapshot_dir
check_plugstack_modes
check_job_key
check_job_instance
check_hung_snapshot_storage
pass "HWLOC_XMLFILE never read in slurmstepd, planted snapshot directory refused, one key per job, one instance per job kept by a requeue, hung storage fails at the deadline"
