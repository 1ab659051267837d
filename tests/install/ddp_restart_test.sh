#!/usr/bin/env bash
# sbatch_templates/ddp-restart against a stand-in srun, scontrol, squeue, sinfo, scancel and ddp-why (no Slurm
# needed; each case takes well under a second, a replacement whose step is not found five): stop requests (SIGUSR2,
# SIGTERM, exit status 75) requeue the job, a cancelled job stays cancelled, a request between attempts starts no
# further attempt, SIGTERM reaches the tasks as SIGUSR2 (srun turns its own SIGTERM into SIGKILL of the tasks), srun
# is told to ignore SIGTERM where it can, srun's output keeps flowing after the SIGTERM that Slurm sends the whole
# batch step, a task that prints an "srun: error:" line of its own does not decide which node failed, a replacement
# still waiting to join when its step fell back is ended at once, and the nodes that failed a step join the job's
# ExcNodeList when it is requeued. (tests/cluster/fault_tolerance.sh and recover_in_place.sh run ddp-restart on a
# real Slurm.)
set -euo pipefail
RESTART=$(cd "$(dirname "$0")/../../sbatch_templates" && pwd)/ddp-restart
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
BIN=$WORK/bin
mkdir "$BIN"

# srun: records its arguments, labels its "tasks'" lines under --label (as srun does), and acts out FAKE_SRUN.
cat >"$BIN/srun" <<'EOF'
#!/usr/bin/env bash
if [ "${1:-}" = --help ]; then
  echo "Usage: srun [OPTIONS(0)...] [ : [OPTIONS(N)...]] executable(0) [args(0)...]"
  [ -z "${FAKE_SRUN_IGNORES_SIGNALS:-}" ] || echo "      --ignore-signals=signals... srun ignores these signals"
  exit 0
fi
echo "$*" >>"$FAKE_DIR/srun-calls"
# A step of the job: its number in the steps that ever ran, its srun's pid in the file (squeue, scontrol and scancel
# below read them).
mkdir -p "$FAKE_DIR/steps"
step=$(ls "$FAKE_DIR/steps" | wc -l)
echo $$ >"$FAKE_DIR/steps/$step"
trap 'rm -f "$FAKE_DIR/steps/$step"' EXIT
label=""
for arg in "$@"; do [ "$arg" != --label ] || label="0: "; done
task() { echo "$label$*"; }             # a line of task 0 on stdout
task_err() { echo "$label$*" >&2; }     # on stderr
stopped() { task "task 0: stopped at the step boundary on SIGUSR2"; exit 75; }
case "$FAKE_SRUN" in
  forged)  # the task writes a line in srun's words, naming another node, then fails
    task_err "srun: error: node9: task 0: Exited with exit code 1"
    echo "srun: error: node1: task 0: Exited with exit code 1" >&2
    exit 1 ;;
  stop-on-usr2)  # the tasks stop on the USR2 srun passes on; SIGTERM is srun's --ignore-signals=TERM
    trap 'usr2=1' USR2
    trap 'term=1' TERM
    touch "$FAKE_DIR/running"
    while [ -z "${usr2:-}" ]; do sleep 0.05; done
    [ -z "${term:-}" ] || task "task 0: got SIGTERM from its slurmstepd"
    stopped ;;
  exit-75)  # the tasks got SIGTERM from their own slurmstepd (GraceTime preemption, scancel --signal=TERM)
    task "task 0: stopped at the step boundary on SIGTERM"
    exit 75 ;;
  fail)
    echo "srun: error: node1: task 0: Exited with exit code 1" >&2
    exit 1 ;;
  replaced)  # a step that recovers in place: a task fails, it gets a replacement, the step then fails (a fallback)
    if [ -n "${DDP_JOIN:-}" ]; then  # the replacement: waits to join, and its srun ignores SIGTERM (26.05's does)
      trap '' TERM
      touch "$FAKE_DIR/replacement-running"
      while :; do sleep 0.05; done
    fi
    [ "$DDP_RESTART_ATTEMPT" = 0 ] || { date +%s.%N >"$FAKE_DIR/next-attempt"; exit 0; }
    echo "srun: error: node1: task 0: Exited with exit code 1" >&2
    while [ ! -e "$FAKE_DIR/replacement-running" ]; do sleep 0.05; done
    date +%s.%N >"$FAKE_DIR/fallback"
    exit 1 ;;
esac
EOF
# scontrol: what slurmctld would say of the job (FAKE_JOB_STATE), and requeues recorded.
cat >"$BIN/scontrol" <<'EOF'
#!/usr/bin/env bash
case "$1 ${2:-}" in
  "show job")
    excluded=$(cat "$FAKE_DIR/excluded" 2>/dev/null || echo "${FAKE_EXCLUDED:-(null)}")
    echo "JobId=$3 JobName=t UserId=u(1) JobState=${FAKE_JOB_STATE:-RUNNING} Reason=${FAKE_REASON:-None} Dependency=(null) Restarts=0 ReqNodeList=(null) ExcNodeList=$excluded" ;;
  "show hostnames")  # node[1-2] or a comma list
    case "$3" in "node[1-2]") echo node1; echo node2 ;; *) tr ',' '\n' <<<"$3" ;; esac ;;
  "update "*)  # JobId=42 ExcNodeList=LIST: refused unless the job is pending (FAKE_UPDATE_STATE)
    if [ "${FAKE_UPDATE_STATE:-PENDING}" != PENDING ]; then echo "Job is no longer pending execution for job 42" >&2; exit 1; fi
    echo "${3#ExcNodeList=}" >"$FAKE_DIR/excluded" ;;
  "show step")  # one line per step (-o), as 22.05 to 26.05 print it; none with FAKE_NO_STEPS
    [ -z "${FAKE_NO_STEPS:-}" ] || exit 0
    for file in "$FAKE_DIR"/steps/*; do
      [ -e "$file" ] || continue
      echo "StepId=42.$(basename "$file") UserId=1000 StartTime=2026-12-07T00:00:00 TimeLimit=UNLIMITED" \
        "State=RUNNING Partition=debug NodeList=node1 Nodes=1 CPUs=1 Tasks=1 Name=program Network=(null)" \
        "TRES=cpu=1 ResvPorts=(null) CPUFreqReq=Default Dist=Block SrunHost:Pid=node1:$(cat "$file")"
    done ;;
  "requeue "*) echo "$2" >>"$FAKE_DIR/requeued" ;;
esac
EOF
# sinfo -N -o %N: the partition's nodes, one line per node and partition (FAKE_PARTITION_NODES, else node1 to node4).
cat >"$BIN/sinfo" <<'EOF'
#!/usr/bin/env bash
for node in ${FAKE_PARTITION_NODES:-node1 node2 node3 node4}; do echo "$node"; done
EOF
# squeue -s: the job's running steps ("%i" or "%i %N"), all on node1.
cat >"$BIN/squeue" <<'EOF'
#!/usr/bin/env bash
for file in "$FAKE_DIR"/steps/*; do
  [ -e "$file" ] || continue
  case "$*" in *"%N"*) echo "42.$(basename "$file") node1" ;; *) echo "42.$(basename "$file")" ;; esac
done
EOF
# scancel --signal=KILL JOB.STEP: the step's tasks die, and its srun with them.
cat >"$BIN/scancel" <<'EOF'
#!/usr/bin/env bash
echo "$*" >>"$FAKE_DIR/scancel-calls"
step=${*: -1}
kill -KILL "$(cat "$FAKE_DIR/steps/${step#42.}")"
EOF
# ddp-why runs between attempts: with FAKE_WHY_SIGNAL, a stop request arrives right then.
cat >"$BIN/ddp-why" <<'EOF'
#!/usr/bin/env bash
[ -z "${FAKE_WHY_SIGNAL:-}" ] || kill "-$FAKE_WHY_SIGNAL" "$PPID"
EOF
chmod +x "$BIN"/*

case_dir() {  # NAME: a fresh directory for one case's files
  FAKE_DIR=$WORK/$1
  mkdir "$FAKE_DIR"
  export FAKE_DIR
}
restart() {  # starts ddp-restart in the background (after $LAUNCH); sets pid; output in $FAKE_DIR/out and err
  PATH="$BIN:$PATH" SLURM_JOB_ID=42 SLURM_JOB_NODELIST="node[1-2]" SLURM_JOB_NUM_NODES=2 SLURM_JOB_PARTITION=debug \
    DDP_WHY="$BIN/ddp-why" \
    ${LAUNCH:-} "$RESTART" --max-restarts "${MAX_RESTARTS:-1}" -- srun -N1 program "$@" >"$FAKE_DIR/out" 2>"$FAKE_DIR/err" &
  pid=$!
}
finish() {  # waits for ddp-restart; sets status
  status=0
  wait "$pid" || status=$?
}
expect() {  # FILE TEXT WHAT
  grep -qF -- "$2" "$1" || fail "$3: no '$2' in $(basename "$1"):"$'\n'"$(cat "$FAKE_DIR"/out "$FAKE_DIR"/err)"
}
expect_not() {  # FILE TEXT WHAT
  ! grep -qF -- "$2" "$1" || fail "$3: '$2' in $(basename "$1"):"$'\n'"$(cat "$FAKE_DIR"/out "$FAKE_DIR"/err)"
}
finish_within() {  # SECONDS WHAT: finish, failing when ddp-restart takes longer
  local deadline=$((SECONDS + $1))
  while kill -0 "$pid" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    pkill -KILL -P "$pid" 2>/dev/null || true
    kill -KILL "$pid"
    fail "$2: ddp-restart still running after $1 s:"$'\n'"$(cat "$FAKE_DIR"/err)"
  fi
  finish
}
wait_for_file() { for _ in $(seq 1200); do [ ! -e "$1" ] || return 0; sleep 0.05; done; fail "$1 never appeared"; }

# A task's own "srun: error:" line neither names the failed node nor is left out of the job's output.
case_dir forged
MAX_RESTARTS=0 FAKE_SRUN=forged restart
finish
[ "$status" = 1 ] || fail "forged: exit status $status"
expect "$FAKE_DIR/err" "attempt 1 failed with exit code 1; first to fail: node1 (task 0: Exited with exit code 1)" \
  "forged: the node srun named"
expect "$FAKE_DIR/err" $'\n'"srun: error: node9: task 0: Exited with exit code 1" "forged: the task's line, as written"
expect "$FAKE_DIR/srun-calls" "--label -N1 program" "forged: srun labels task output"

# SIGTERM to the batch shell: the tasks get SIGUSR2 through srun, stop, and the job is requeued.
case_dir term
FAKE_SRUN=stop-on-usr2 restart
wait_for_file "$FAKE_DIR/running"
kill -TERM "$pid"
finish
[ "$status" = 0 ] || fail "term: exit status $status"
expect "$FAKE_DIR/err" "ddp-restart: SIGTERM: asking the tasks for a snapshot" "term"
expect "$FAKE_DIR/out" "task 0: stopped at the step boundary on SIGUSR2" "term: USR2 reached the tasks"
expect "$FAKE_DIR/err" "tasks ended with exit code 75 after SIGTERM; requeueing job 42 (JobState=RUNNING, Reason=None)" \
  "term"
expect "$FAKE_DIR/requeued" "42" "term: requeued"
expect_not "$FAKE_DIR/srun-calls" "--ignore-signals" "term: srun without --ignore-signals"

# Slurm ends the job (scancel): SIGTERM reaches every process of the batch step at once. srun (26.05's, told to
# ignore it) and its output relays go on until the tasks have stopped; the job, which slurmctld shows COMPLETING
# (hiding that it was cancelled), is not requeued.
case_dir cancelled
# setsid: ddp-restart leads a process group of its own, as the batch script does in its step.
LAUNCH=setsid FAKE_SRUN=stop-on-usr2 FAKE_SRUN_IGNORES_SIGNALS=1 FAKE_JOB_STATE=COMPLETING restart
wait_for_file "$FAKE_DIR/running"
kill -TERM -- "-$pid"
finish
[ "$status" = 75 ] || fail "cancelled: exit status $status: $(cat "$FAKE_DIR/err")"
expect "$FAKE_DIR/srun-calls" "--label --ignore-signals=TERM -N1 program" "cancelled: srun ignores SIGTERM"
expect "$FAKE_DIR/out" "task 0: got SIGTERM from its slurmstepd" "cancelled: output after SIGTERM"
expect "$FAKE_DIR/out" "task 0: stopped at the step boundary on SIGUSR2" "cancelled: output after SIGTERM"
expect "$FAKE_DIR/err" "Slurm is ending job 42 (JobState=COMPLETING, Reason=None), which is not requeued here" \
  "cancelled"
[ ! -e "$FAKE_DIR/requeued" ] || fail "cancelled: the job was requeued"

# The time limit without a warning signal: the job, out of time, is requeued to go on in a new allocation.
case_dir timelimit
FAKE_SRUN=stop-on-usr2 FAKE_JOB_STATE=COMPLETING FAKE_REASON=TimeLimit restart
wait_for_file "$FAKE_DIR/running"
kill -TERM "$pid"
finish
[ "$status" = 0 ] || fail "timelimit: exit status $status"
expect "$FAKE_DIR/err" "requeueing job 42 (JobState=COMPLETING, Reason=TimeLimit)" "timelimit"
expect "$FAKE_DIR/requeued" "42" "timelimit: requeued"

# Tasks that stopped on a signal of their own exit with 75: the job is requeued, not restarted.
case_dir exit75
FAKE_SRUN=exit-75 restart
finish
[ "$status" = 0 ] || fail "exit75: exit status $status"
expect "$FAKE_DIR/err" "tasks stopped on request (exit code 75); requeueing job 42" "exit75"
expect "$FAKE_DIR/requeued" "42" "exit75: requeued"
[ "$(wc -l <"$FAKE_DIR/srun-calls")" = 1 ] || fail "exit75: srun ran $(wc -l <"$FAKE_DIR/srun-calls") times"

# A stop request between attempts (here while ddp-why explains the failure) starts no further attempt.
for signal in USR2 TERM; do
  case_dir "between-$signal"
  FAKE_SRUN=fail FAKE_WHY_SIGNAL=$signal restart
  finish
  [ "$status" = 0 ] || fail "between $signal: exit status $status: $(cat "$FAKE_DIR/err")"
  [ "$(wc -l <"$FAKE_DIR/srun-calls")" = 1 ] || fail "between $signal: srun ran $(wc -l <"$FAKE_DIR/srun-calls") times"
  expect "$FAKE_DIR/err" "SIG$signal before attempt 2 started; requeueing job 42" "between $signal"
done

# The command's own --label keeps the labels in the job's output.
case_dir labelled
MAX_RESTARTS=0 FAKE_SRUN=exit-75 FAKE_JOB_STATE=PENDING restart --label
finish
expect "$FAKE_DIR/out" "0: task 0: stopped at the step boundary" "labelled: the user's labels stay"
expect "$FAKE_DIR/err" "Slurm requeues job 42 itself" "labelled: a job already pending"
# A step that recovers in place falls back (its survivors end it) while a replacement still waits to join, its srun
# ignoring SIGTERM: the replacement's step is cancelled with SIGKILL and the next attempt starts at once; where no
# step of that srun is found, its srun is killed a few seconds later.
for how in scancel kill; do
  case_dir "replaced-$how"
  FAKE_SRUN=replaced FAKE_NO_STEPS=$([ "$how" = scancel ] || echo 1) restart --ddp-recover
  finish_within 20 "replaced, $how"
  [ "$status" = 0 ] || fail "replaced, $how: exit status $status: $(cat "$FAKE_DIR/err")"
  expect "$FAKE_DIR/err" "starting a replacement for the task that failed on node1" "replaced, $how"
  if [ "$how" = scancel ]; then
    expect "$FAKE_DIR/err" "ending the replacement in step 42.1 (scancel --signal=KILL)" "replaced: its step"
    expect "$FAKE_DIR/scancel-calls" "--quiet --signal=KILL 42.1" "replaced: scancel of the replacement's step"
  else
    expect "$FAKE_DIR/err" "killing the srun of a replacement (pid" "replaced, kill"
    [ ! -e "$FAKE_DIR/scancel-calls" ] || fail "replaced, kill: scancel ran: $(cat "$FAKE_DIR/scancel-calls")"
  fi
  echo "replaced, $how: from the fallback to the next attempt's start:" \
    "$(python3 -c 'import sys; print(f"{float(sys.argv[2]) - float(sys.argv[1]):.1f}")' \
      "$(cat "$FAKE_DIR/fallback")" "$(cat "$FAKE_DIR/next-attempt")") s"
done
# Bad nodes remembered: a stop request after a failed attempt requeues the job with the failed node added to the
# ExcNodeList it had (the user's own node3 kept), so no later allocation lands there.
case_dir remembered
FAKE_SRUN=fail FAKE_WHY_SIGNAL=USR2 FAKE_EXCLUDED=node3 restart
finish
[ "$status" = 0 ] || fail "remembered: exit status $status: $(cat "$FAKE_DIR/err")"
expect "$FAKE_DIR/requeued" "42" "remembered: requeued"
expect "$FAKE_DIR/excluded" "node1,node3" "remembered: ExcNodeList"
expect "$FAKE_DIR/err" "job 42 leaves out node1 from now on, after this requeue too (ExcNodeList=node1,node3)" \
  "remembered"

# Turned off: the node stays in, and the output says why.
case_dir remember-off
FAKE_SRUN=fail FAKE_WHY_SIGNAL=USR2 DDP_REMEMBER_BAD_NODES=0 restart
finish
[ ! -e "$FAKE_DIR/excluded" ] || fail "remember-off: ExcNodeList became $(cat "$FAKE_DIR/excluded")"
expect "$FAKE_DIR/err" "not leaving node1 out of job 42's later allocations: DDP_REMEMBER_BAD_NODES=0" "remember-off"

# A list that would leave the partition fewer nodes than the job's two: the node stays in, named with the fix.
case_dir remember-all
FAKE_SRUN=fail FAKE_WHY_SIGNAL=USR2 FAKE_PARTITION_NODES="node1 node2" restart
finish
[ ! -e "$FAKE_DIR/excluded" ] || fail "remember-all: ExcNodeList became $(cat "$FAKE_DIR/excluded")"
expect "$FAKE_DIR/err" "not leaving node1 out of job 42's later allocations: partition debug would have fewer than the job's 2 nodes; drain node1" \
  "remember-all"

# Slurm ends the job (scancel or scontrol requeue, both COMPLETING): a cancelled job, no longer pending, is passed
# over without a word; a requeued one, pending again, gets the node in its list.
for how in cancelled requeued; do
  case_dir "remember-$how"
  FAKE_SRUN=fail FAKE_WHY_SIGNAL=TERM FAKE_JOB_STATE=COMPLETING \
    FAKE_UPDATE_STATE=$([ "$how" = requeued ] && echo PENDING || echo COMPLETING) restart
  finish
  if [ "$how" = requeued ]; then
    expect "$FAKE_DIR/excluded" "node1" "remember-requeued: ExcNodeList"
  else
    [ ! -e "$FAKE_DIR/excluded" ] || fail "remember-cancelled: ExcNodeList became $(cat "$FAKE_DIR/excluded")"
    expect_not "$FAKE_DIR/err" "could not leave" "remember-cancelled: a cancelled job is passed over"
  fi
done

echo "ddp_restart_test: every case passed"
