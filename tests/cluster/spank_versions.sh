#!/usr/bin/env bash
# How the Slurm under test treats SPANK plugins, checked against what spank_plugin/slurm_versions.h says of its
# version: how often remote option callbacks run, how srun ends when user_init or task_init fails, and that a
# user_init failure in a batch job drains the node (why ddp.so never fails there). Then the same cases with ddp.so
# itself: whatever the version, its refusals fail the step with exit status 1 and leave every node in service, also
# with an "optional" plugstack line, and --ddp and the job's key hold under srun's and sbatch's --export.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
if [ -z "$DDP_PLUGIN" ] || [ -z "${DDP_SPANK_PROBE:-}" ]; then skip "the plugin is not built"; fi

# The running Slurm's series as a number: 22.05 -> 2205, 24.11 -> 2411.
version=$(run_on_cluster srun --version | grep -oE '[0-9]+\.[0-9]+\.[0-9]+' | head -n 1)
[ -n "$version" ] || fail "cannot read the Slurm version from srun --version"
series=$(awk -F. '{printf "%d%02d", $1, $2}' <<<"$version")
echo "Slurm $version"

probe=$(stage "$DDP_SPANK_PROBE")
set_plugstack "required $probe"

check_option_callbacks() {
  local expected=2
  [ "$series" -lt 2405 ] || expected=1
  assert_eq "$expected" "$(run_on_cluster srun --probe-count -N1 -n1 printenv SPANK_PROBE_REMOTE_CALLS)" \
    "remote option callbacks on Slurm $version (twice before 24.05, once since)"
}

check_step_failures() {
  local rc=0 expected=0
  run_on_cluster srun --probe-fail=user_init -N1 -n1 true >"$TEST_DIR/user_init.log" 2>&1 || rc=$?
  [ "$series" -lt 2311 ] || expected=1
  assert_eq "$expected" "$rc" "srun's exit status when user_init fails on Slurm $version (0 before 23.11, 1 since)"
  assert_contains "$(cat "$TEST_DIR/user_init.log")" "failing user_init as asked" "user_init's message reaches srun"
  rc=0
  run_on_cluster srun --probe-fail=task_init -N1 -n1 true >/dev/null 2>&1 || rc=$?
  assert_eq 1 "$rc" "srun's exit status when task_init fails (every version)"
}

check_batch_user_init_drains() {
  local job
  job=$(submit --no-requeue --probe-fail=user_init -N1 -w node1 -o /dev/null --wrap 'srun -N1 true')
  on_exit resume_nodes
  # The job's own end differs (22.05: COMPLETED, 24.11: FAILED); the node drains on both.
  wait_job "$job" >/dev/null
  assert_match "$(run_on_cluster sinfo -h -N -n node1 -o '%t')" '^drain' "node1 after a batch user_init failure"
  resume_nodes
}

# ddp.so reports every problem from task_init, so on every version its refusals end the step with status 1 and
# drain nothing, in batch jobs too.
check_ddp_refusals() {
  set_plugstack "required $DDP_CLUSTER_PLUGIN"
  assert_fails "a --ddp step whose snapshot directory cannot be made" \
    run_on_cluster srun --ddp --ddp-snapshot-dir=/proc/no/such -N2 -n2 true
  assert_contains "$FAILED_OUTPUT" "ddp: snapshot directory '/proc/no/such' cannot be created" "the refusal"
  local job
  job=$(submit --no-requeue -N2 -o "$TEST_DIR/batch.out" --wrap \
    "srun --ddp --ddp-snapshot-dir=/proc/no/such -N2 -n2 true; echo srun=\$?")
  assert_eq COMPLETED "$(wait_job "$job")" "the batch job around a refused --ddp step"
  assert_contains "$(cat "$TEST_DIR/batch.out")" "srun=1" "srun's status inside the batch job"
  assert_eq "" "$(run_on_cluster sinfo -h -t drain,drained,draining,down -o %N)" "no node drained or down"
}

# With "optional" in plugstack.conf (install-head-node.sh --optional), Slurm ignores a failing callback: before, a
# refused snapshot directory printed its error and the tasks ran anyway, without any --ddp variable, exit status 0.
# A refusal ends the tasks (and srun) itself, whatever the line says; steps without --ddp are not touched.
check_ddp_refusals_when_optional() {
  local dir=$TEST_DIR/theirs
  mkdir -m 0777 "$dir"
  chown 65533:65533 "$dir"
  set_plugstack "optional $DDP_CLUSTER_PLUGIN"
  # shellcheck disable=SC2016  # expanded by the tasks
  assert_fails "a refused snapshot directory with an optional plugstack line" \
    run_on_cluster srun --ddp --ddp-snapshot-dir="$dir" -N2 -n2 sh -c 'echo "task ran: RANK=${RANK:-none}"'
  assert_contains "$FAILED_OUTPUT" "ddp: snapshot directory '$dir' is owned by uid 65533" "the refusal, optional"
  assert_not_contains "$FAILED_OUTPUT" "task ran" "no task ran, optional"
  assert_contains "$FAILED_OUTPUT" "Exited with exit code 1" "the tasks' exit status, optional"
  # A refusal in srun itself (a bad plugstack argument fails --ddp requests only).
  set_plugstack "optional $DDP_CLUSTER_PLUGIN port_range=bogus"
  assert_fails "--ddp with a bad plugstack argument, optional" run_on_cluster srun --ddp -N1 -n1 echo "task ran"
  assert_contains "$FAILED_OUTPUT" "ddp: plugstack argument 'port_range=bogus'" "srun's refusal, optional"
  assert_not_contains "$FAILED_OUTPUT" "task ran" "srun launched nothing, optional"
  assert_eq "no ddp" "$(run_on_cluster srun -N1 -n1 echo no ddp)" "a step without --ddp, optional"
  set_plugstack "required $DDP_CLUSTER_PLUGIN"
}

# --export limits what reaches the tasks from the caller's environment, not the plugin's options (24.05 made them
# reach the remote side separately; on 22.05 they ride in the launch message): on every version, --ddp under
# srun --export=NONE, and a batch job's #SBATCH --ddp under sbatch --export=NONE or an inner srun --export=NONE,
# still give every task the contract, the job's key included (it travels as SLURM_SPANK_DDP_JOB_KEY too, which
# --export keeps: before, no task had DDP_JOB_KEY and the port and ddp-train's store proof came from public ids).
# shellcheck disable=SC2016  # expanded by the tasks
print_key='echo "${RANK:-none} ${DDP_JOB_KEY:-nokey}"'
check_export() {
  set_plugstack "required $DDP_CLUSTER_PLUGIN"
  local out job
  out=$(run_on_cluster srun --export=NONE --ddp -N2 -n2 /bin/sh -c "$print_key" | sort)
  assert_eq $'0\n1' "$(cut -d' ' -f1 <<<"$out")" "RANK of srun --export=NONE --ddp on Slurm $version"
  assert_match "$(cut -d' ' -f2 <<<"$out" | sort -u)" '^[0-9a-f]{32}$' \
    "one DDP_JOB_KEY for every task of srun --export=NONE --ddp on Slurm $version: $out"
  # Under --export=NONE the batch script has no PATH of the caller's: srun by its full path (/opt/slurm/bin on a
  # Slurm built from source).
  local srun_path
  srun_path=$(run_on_cluster sh -c 'command -v srun')
  job=$(submit --export=NONE --ddp -N1 -o "$TEST_DIR/export-none.out" --wrap "$srun_path -N1 -n1 /bin/sh -c '$print_key'")
  assert_eq COMPLETED "$(wait_job "$job")" "sbatch --export=NONE --ddp"
  assert_match "$(cat "$TEST_DIR/export-none.out")" '^0 [0-9a-f]{32}$' \
    "RANK and DDP_JOB_KEY in a step of sbatch --export=NONE --ddp on Slurm $version"
  job=$(submit --ddp -N1 -o "$TEST_DIR/inner-export-none.out" --wrap "echo outer \$DDP_JOB_KEY; srun --export=NONE -N1 -n1 /bin/sh -c '$print_key'")
  assert_eq COMPLETED "$(wait_job "$job")" "sbatch --ddp with srun --export=NONE"
  out=$(cat "$TEST_DIR/inner-export-none.out")
  assert_match "$out" '^outer [0-9a-f]{32}' "the batch script's key: $out"
  assert_eq "0 $(sed -n 's/^outer //p' <<<"$out")" "$(sed -n '2p' <<<"$out")" \
    "the job's own key in srun --export=NONE inside sbatch --ddp on Slurm $version"
}

# 25.05 made any non-zero return of a callback an error; before it, Slurm tested for a negative one and went on.
check_exact_return_values() {
  local rc=0 expected=1
  [ "$series" -ge 2505 ] || expected=0
  run_on_cluster srun --probe-fail=task_init_1 -N1 -n1 true >/dev/null 2>&1 || rc=$?
  assert_eq "$expected" "$rc" "srun's exit status when task_init returns 1 on Slurm $version (0 before 25.05, 1 since)"
}

# A failing slurm_spank_init in slurmstepd fails the step (srun says "launch failed" and, as for user_init, exits 0
# before 23.11). In a batch job it fails in the batch step too, and that drains the node on every version (and
# requeues the job) unless, from 25.05 on, the plugin declares slurm_spank_init_failure_mode: ddp.so declares
# ESPANK_JOB_FAILURE, so there its own failure (its option table refused: another plugin took the name) fails the
# job and leaves the node in service. Before 25.05 Slurm has no such choice (22.05 does not refuse the second
# plugin's option of the same name there: nothing fails), so only what happened is printed.
node1_drained() { [ -n "$(run_on_cluster sinfo -h -N -n node1 -t drain,drained,draining -o %N)" ] && echo yes || echo no; }

check_init_failure_mode() {
  local job
  on_exit resume_nodes
  set_plugstack "required $probe fail_init"
  local rc=0 expected_rc=1
  [ "$series" -ge 2311 ] || expected_rc=0
  run_on_cluster srun -N1 -w node1 true >/dev/null 2>&1 || rc=$?
  assert_eq "$expected_rc" "$rc" \
    "srun's exit status when slurm_spank_init fails on Slurm $version (0 before 23.11: \"launch failed\", 1 since)"
  assert_eq no "$(node1_drained)" "node1 drained after an srun step's init failure on Slurm $version"
  job=$(submit --no-requeue -N1 -w node1 -o /dev/null --wrap 'srun -N1 true')
  wait_job "$job" >/dev/null
  assert_eq yes "$(node1_drained)" "node1 drained after a batch job's init failure, without a failure mode, on Slurm $version"
  resume_nodes
  set_plugstack "required $probe claim_ddp" "required $DDP_CLUSTER_PLUGIN"
  job=$(submit --no-requeue -N1 -w node1 -o /dev/null --wrap 'srun -N1 true')
  wait_job "$job" >/dev/null
  if [ "$series" -ge 2505 ]; then
    assert_eq no "$(node1_drained)" "node1 drained after ddp.so's init failed in a batch job on Slurm $version"
  else
    echo "Slurm $version: ddp.so's init beside a plugin that took --ddp in slurmstepd: node1 drained: $(node1_drained)"
  fi
  resume_nodes
  set_plugstack "required $probe"
}

# After a task exits badly under --kill-on-bad-exit the other tasks get SIGCONT and SIGTERM, then SIGKILL after
# KillWait: a survivor has that long to save its state. SchedMD's notes for 26.05 say it sends that sequence where
# it sent SIGKILL alone; with srun -K, 22.05 and 24.11 send it as well (seen here), so it is checked on every version.
check_survivors_of_a_bad_exit() {
  local got=killed rc=0
  # shellcheck disable=SC2016  # expanded by the tasks
  run_on_cluster srun -K1 -N2 -n2 bash -c 'if [ "$SLURM_PROCID" = 0 ]; then sleep 2; exit 3; fi
    trap "echo TERM >$0/survivor-term; trap \"\" TERM" TERM; for _ in $(seq 300); do sleep 0.1; done; echo done >$0/survivor-done' \
    "$TEST_DIR" >/dev/null 2>&1 || rc=$?
  [ "$rc" -ne 0 ] || fail "a step whose task 0 exited 3 ended with status 0"
  [ ! -e "$TEST_DIR/survivor-term" ] || got=terminated
  assert_eq terminated "$got" "what the surviving task got after task 0 exited 3 under srun -K on Slurm $version"
  [ ! -e "$TEST_DIR/survivor-done" ] || fail "the survivor ran to its end: no SIGKILL followed on Slurm $version"
}

check_option_callbacks
check_exact_return_values
check_init_failure_mode
check_survivors_of_a_bad_exit
check_step_failures
check_batch_user_init_drains
check_ddp_refusals
check_ddp_refusals_when_optional
check_export
pass "Slurm $version: option callbacks, return values, init failure mode, survivors of a bad exit, step failures, batch drain; ddp.so's refusals drain nothing and hold with an optional plugstack line; --ddp and the job's key under --export"
