#!/usr/bin/env bash
# When a task of an `srun --ddp` step fails:
# - the step ends (srun's --kill-on-bad-exit=1 meaning) while the other ranks would still sleep for minutes; with
#   --ddp-keep-going or Slurm's own --kill-on-bad-exit=0 the others run to their end;
# - the failed rank's exception reaches its TORCHELASTIC_ERROR_FILE through PyTorch's own @record; srun names the first
#   failure when it exits, and ddp-why shows rank, node, exit status, exception and traceback; for a rank killed
#   without a report, ddp-why names it from srun's lines and shows the end of its output (of the step's output, naming
#   srun --label, when srun did not label the lines);
# - a step that succeeds leaves no log directory; PyTorch's watchdog settings reach the tasks, a user's value wins;
# - bad input: a report that is not JSON or is another step's is ignored with a warning, another user's job and an
#   unreadable log directory are refused in one line, a relative DDP_LOG_DIR fails the step naming it;
# - attacks and stale reports: another user's directory and links in a shared DDP_LOG_DIR are refused (no report
#   follows a link, none of theirs is printed), and what an earlier attempt of the same step id left is gone before
#   the step starts (a step that succeeds is never reported failed).
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
[ -n "$DDP_PLUGIN" ] || skip "the plugin is not built"
/usr/bin/python3 -c 'import torch.distributed' 2>/dev/null || skip "Debian's python3-torch is not installed"
DDP_WHY=$DDP_BUILD_DIR/src/ddp-why
[ -x "$DDP_WHY" ] || fail "ddp-why is not built ($DDP_WHY)"
script=$(stage "$(dirname "$0")/fail_rank.py")
logs=$TEST_DIR/logs
markers=$TEST_DIR/markers
install -d -o "$DDP_CLUSTER_USER" "$markers"
STEP=(srun --ddp -N2 --ntasks-per-node=2)

# run_step NAME VAR=VALUE... -- SRUN_ARGS...: the fault injection as one step; srun's output in $TEST_DIR/NAME.out,
# its exit status in $rc. `timeout` only bounds a broken run: the ranks that do not fail sleep 300 s.
run_step() {
  local name=$1 vars=()
  shift
  while [ "$1" != -- ]; do vars+=("$1"); shift; done
  shift
  rm -f "$markers"/done-*
  rc=0
  run_on_cluster env DDP_LOG_DIR="$logs" MARKERS="$markers" "${vars[@]}" timeout 200 \
    "$@" /usr/bin/python3 "$script" >"$TEST_DIR/$name.out" 2>&1 || rc=$?
  [ "$rc" != 124 ] || fail "$name: the step did not end when rank FAIL_RANK failed: $(cat "$TEST_DIR/$name.out")"
}

why() { run_on_cluster env DDP_LOG_DIR="$logs" "$DDP_WHY" "$@"; }

# 1. An exception on rank 1 ends the step; the others never reach their marker.
run_step raise FAIL_RANK=1 -- "${STEP[@]}"
out=$(cat "$TEST_DIR/raise.out")
[ "$rc" != 0 ] || fail "the step succeeded although rank 1 failed: $out"
[ -z "$(find "$markers" -mindepth 1)" ] || fail "ranks kept running after rank 1 failed: $(find "$markers" -mindepth 1)"
assert_match "$out" "ddp: step [0-9]+\\.[0-9]+ failed; first failure: rank 1 on node1, at [0-9-]+ [0-9:.]+: ValueError: bad batch 7 on rank 1 \\(ddp-why [0-9]+\\.[0-9]+ shows the whole report\\)" \
  "srun names the first failure at exit"
step=$(sed -n 's/^ddp: step \([0-9]*\.[0-9]*\) failed.*/\1/p' <<<"$out")
report=$(why "$step")
assert_contains "$report" "ddp-why: step $step: first failure: rank 1 on node1" "ddp-why names rank and node"
assert_contains "$report" "ValueError: bad batch 7 on rank 1" "ddp-why shows the exception"
assert_contains "$report" "fail_rank.py\", line" "ddp-why shows the traceback"
assert_contains "$report" "in fail" "the traceback reaches the raising function"
# The same through the job id alone, with srun's lines: srun's exit status of the task joins the report.
report=$(why --stderr "$TEST_DIR/raise.out" "${step%.*}")
assert_contains "$report" "first failure: rank 1 on node1, Exited with exit code 1, at" "exit status from srun's line"

# 2. Bad reports beside the real one: ignored with a warning each, the answer unchanged.
run_on_cluster sh -c "printf 'Segmentation fault' >'$logs/$step/error-rank3-node2.json'
  printf '{\"message\": {\"message\": \"old\", \"extraInfo\": {\"timestamp\": \"1\", \"run_id\": \"1.99\"}}}' >'$logs/$step/error-rank2-node2.json'"
report=$(why "$step" 2>&1)
assert_contains "$report" "error-rank3-node2.json is not JSON; ignored" "a report that is not JSON"
assert_contains "$report" "error-rank2-node2.json is from step '1.99', not $step; ignored" "another step's report"
assert_contains "$report" "first failure: rank 1 on node1" "the first failure is unchanged"

# 3. Refusals in one line: an unreadable log directory, another user's job.
assert_fails "an unreadable log directory" run_on_cluster "$DDP_WHY" --log-dir /root "$step"
assert_match "$FAILED_OUTPUT" "^ddp-why: log directory '/root' cannot be opened \\('/root': Permission denied\\); give --log-dir DIR where you may read the reports$" \
  "unreadable log directory"
if other=$(env SLURM_CONF="$SLURM_CONF" "$DDP_WHY" "$step" 2>&1); then fail "root read ddpuser's job: $other"; fi
assert_match "$other" "^ddp-why: job ${step%.*} is $DDP_CLUSTER_USER's: its reports are in that user's DDP_LOG_DIR.*$" \
  "another user's job"

# 4. A rank killed outright leaves no report: srun's line names it, ddp-why shows the end of its output.
run_step kill FAIL_RANK=2 FAIL_HOW=kill -- "${STEP[@]}" --label
out=$(cat "$TEST_DIR/kill.out")
[ -z "$(find "$markers" -mindepth 1)" ] || fail "ranks kept running after rank 2 was killed: $(find "$markers" -mindepth 1)"
job=$(sed -n 's/.*is about to fail (kill) in step \([0-9]*\)\..*/\1/p' <<<"$out")
report=$(why --stderr "$TEST_DIR/kill.out" "$job")
assert_contains "$report" "first failure: rank 2 on node2, Killed (no error report" "the killed rank, from srun's line"
assert_contains "$report" "last lines of task 2's output:" "its own output, by srun's labels"
assert_contains "$report" "rank 2 is about to fail (kill) in step $job." "the end of its output"
# Without --label, srun's output cannot be split by task: ddp-why says so, names --label and shows the step's last
# lines before srun's line about the kill.
run_step kill_unlabelled FAIL_RANK=2 FAIL_HOW=kill -- "${STEP[@]}"
out=$(cat "$TEST_DIR/kill_unlabelled.out")
job=$(sed -n 's/.*is about to fail (kill) in step \([0-9]*\)\..*/\1/p' <<<"$out")
report=$(why --stderr "$TEST_DIR/kill_unlabelled.out" "$job")
assert_contains "$report" "first failure: rank 2 on node2, Killed (no error report" "the killed rank, unlabelled output"
assert_contains "$report" "task 2's own lines cannot be told apart (srun --label labels them)" "the way to its own lines"
assert_contains "$report" "    rank 2 is about to fail (kill) in step $job." "the step's last lines"

# 5. Opting out: the others run to their end.
run_step keep_going FAIL_RANK=1 SLEEP=2 -- "${STEP[@]}" --ddp-keep-going
finished() { find "$markers" -mindepth 1 -printf '%f\n' | sort | paste -sd' '; }
assert_eq "done-0 done-2 done-3" "$(finished)" "--ddp-keep-going: every other rank finished"
run_step slurm_opt_out FAIL_RANK=1 SLEEP=2 -- "${STEP[@]}" --kill-on-bad-exit=0
assert_eq "done-0 done-2 done-3" "$(finished)" "--kill-on-bad-exit=0: every other rank finished"

# 6. A step that succeeds leaves no directory behind; the watchdog settings reach the task, the user's value wins.
# shellcheck disable=SC2016  # expanded by the task
out=$(run_on_cluster env DDP_LOG_DIR="$logs" TORCH_NCCL_TRACE_BUFFER_SIZE=64 srun --ddp -N1 -n1 \
  sh -c 'echo "id=$SLURM_JOB_ID.$SLURM_STEP_ID"; env | grep -E "^(TORCHELASTIC_ERROR_FILE|TORCH_NCCL_)" | sort')
ok_step=$(sed -n 's/^id=//p' <<<"$out")
assert_contains "$out" "TORCHELASTIC_ERROR_FILE=$logs/$ok_step/error-rank0-node1.json" "the task's error file"
assert_contains "$out" "TORCH_NCCL_ASYNC_ERROR_HANDLING=3" "watchdog tears down a hung process"
assert_contains "$out" "TORCH_NCCL_DUMP_ON_TIMEOUT=1" "flight recorder dumps on timeout"
assert_contains "$out" "TORCH_NCCL_TRACE_BUFFER_SIZE=64" "the user's value wins"
assert_contains "$out" "TORCH_NCCL_DEBUG_INFO_TEMP_FILE=$logs/$ok_step/nccl-node1-rank" "dumps go to the step's directory"
[ ! -e "$logs/$ok_step" ] || fail "the successful step $ok_step left $logs/$ok_step: $(ls -la "$logs/$ok_step")"

# 7. Attacks on the log directory and reports of another attempt, in one held job whose id is known before its steps
# run. Step 0 logs to a team directory everyone may write (1777, root's): another user (65533) made <job>.0 there
# first, with a report of its own, and keeps a link named like task 0's error file pointing at a file of the
# victim's (planted again once the task runs: removing it once does not help). Step 1 logs to the user's own
# directory, where an earlier attempt of <job>.1 (a requeue; a new cluster's job ids) left a report. Before: task 0's
# report overwrote the link's target, ddp-why named the planted report as the first failure, and step 1, which
# succeeded, was reported failed with the earlier attempt's report.
team=$TEST_DIR/team
mkdir -m 1777 "$team"
victim=$TEST_DIR/victims-data
install -o "$DDP_CLUSTER_USER" -m 0644 /dev/null "$victim"
echo "the victim's data" >"$victim"
# What PyTorch's @record does with TORCHELASTIC_ERROR_FILE, once the attacker has planted the link again.
# shellcheck disable=SC2016  # expanded by the task
fail_with_report='touch "$0/step0-running"; while [ ! -e "$0/link-planted" ]; do sleep 0.1; done
  if [ -n "${TORCHELASTIC_ERROR_FILE:-}" ]; then echo "{\"message\": \"ValueError: real\"}" >"$TORCHELASTIC_ERROR_FILE"; fi
  exit 3'
job=$(submit --hold -N1 -n1 -o "$TEST_DIR/attempt.out" --wrap "
  DDP_LOG_DIR=$team srun --ddp -N1 -n1 sh -c '$fail_with_report' '$markers'; echo step0=\$?
  DDP_LOG_DIR=$logs srun --ddp -N1 -n1 true; echo step1=\$?")
plant_link() {
  ln -sfn "$victim" "$team/$job.0/error-rank0-node1.json"
  chown -h 65533:65533 "$team/$job.0/error-rank0-node1.json"
}
install -d -o 65533 -g 65533 -m 0777 "$team/$job.0"
plant_link
echo '{"message": "PLANTED by another user"}' >"$team/$job.0/error-rank1-node1.json"
chown 65533:65533 "$team/$job.0/error-rank1-node1.json"
run_on_cluster mkdir -p "$logs/$job.1"
run_on_cluster sh -c "echo '{\"message\": \"STALE: an earlier attempt\"}' >'$logs/$job.1/error-rank5-node2.json'"
touch -d '1 hour ago' "$logs/$job.1/error-rank5-node2.json"
rm -f "$markers"/step0-running "$markers"/link-planted
run_on_cluster scontrol release "$job"
for _ in $(seq 600); do [ -e "$markers/step0-running" ] && break; sleep 0.1; done
[ -e "$markers/step0-running" ] || fail "step 0 of job $job did not start: $(cat "$TEST_DIR/attempt.out" 2>/dev/null)"
plant_link
touch "$markers/link-planted"
assert_eq COMPLETED "$(wait_job "$job")" "the held job"
out=$(cat "$TEST_DIR/attempt.out")
assert_eq "the victim's data" "$(cat "$victim")" "the link's target after a task's report: $out"
assert_not_contains "$out" "PLANTED" "a report another user planted, at srun's exit"
assert_contains "$out" "ddp: warning: no error reports from node1 in this step: log directory '$team' is owned by uid 0, not by you" \
  "the team directory refused"
assert_contains "$out" "step0=3" "step 0 failed as its task did"
why_team=$(run_on_cluster env DDP_LOG_DIR="$team" "$DDP_WHY" "$job.0" 2>&1 || true)
assert_not_contains "$why_team" "PLANTED" "a report another user planted, in ddp-why"
assert_contains "$why_team" "log directory '$team' is owned by uid 0" "ddp-why refuses the team directory"
assert_not_contains "$out" "STALE" "the earlier attempt's report"
assert_not_contains "$out" "step $job.1 failed" "step 1 succeeded"
assert_contains "$out" "step1=0" "step 1's status"
[ ! -e "$logs/$job.1" ] || fail "the succeeded step $job.1 left $(ls -A "$logs/$job.1")"

# 8. A relative DDP_LOG_DIR fails the step, naming the value and the fix.
assert_fails "a relative DDP_LOG_DIR" run_on_cluster env DDP_LOG_DIR=logs srun --ddp -N1 -n1 true
assert_contains "$FAILED_OUTPUT" "DDP_LOG_DIR='logs' is not an absolute path" "relative DDP_LOG_DIR"
pass "a failed rank ends the step and is named with its exception; keep-going, clean-up and bad input"
