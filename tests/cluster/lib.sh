# Helpers for tests that run on the test cluster of cluster.sh. Source it from a bash test script:
#
#   #!/usr/bin/env bash
#   set -euo pipefail
#   source "$(dirname "$0")/lib.sh"     # skips (exit 77) when not root, fails when no cluster is up
#   out=$(run_on_cluster srun -N2 -n2 hostname | sort)
#   assert_eq $'node1\nnode2' "$out" "hostnames"
#   pass
#
# After sourcing: the variables of `cluster.sh env` (SLURM_CONF, DDP_CLUSTER_SHARED, DDP_CLUSTER_LOCAL, ...),
# TEST_NAME, and TEST_DIR, a fresh directory in the shared storage owned by the job user, removed at exit.
# DDP_PLUGIN is the plugin's path when CTest knows it (empty otherwise); DDP_CLUSTER_PLUGIN is the path the
# cluster loads it from (the same, or a copy the job user can read): use that one in plugstack lines. Any test that rewrites plugstack.conf
# through set_plugstack gets the original back at exit, also on failure.
# shellcheck shell=bash

CLUSTER_SH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/cluster.sh
TEST_NAME=$(basename "$0" .sh)
DDP_PLUGIN=${DDP_PLUGIN:-}
_CLEANUPS=()
_PLUGSTACK_SAVED=""

# ---------------------------------------------------------------------------------------------------- outcome

skip() { echo "SKIP $TEST_NAME: $*"; exit 77; }
pass() { echo "PASS $TEST_NAME${1:+: $*}"; exit 0; }

# fail MESSAGE: the daemon logs usually say why a step did not start, so print their tails with the message.
fail() {
  echo "FAIL $TEST_NAME: $*" >&2
  "$CLUSTER_SH" logs "${FAIL_LOG_LINES:-25}" >&2 2>&1 || true
  exit 1
}

assert_eq() {  # EXPECTED ACTUAL WHAT
  [ "$1" = "$2" ] || fail "$3: expected [$1], got [$2]"
}

assert_contains() {  # HAYSTACK NEEDLE WHAT
  case $1 in *"$2"*) ;; *) fail "$3: [$2] not found in [$1]" ;; esac
}

assert_not_contains() {  # HAYSTACK NEEDLE WHAT
  case $1 in *"$2"*) fail "$3: [$2] must not appear in [$1]" ;; *) ;; esac
}

assert_match() {  # STRING ERE WHAT
  [[ $1 =~ $2 ]] || fail "$3: [$1] does not match /$2/"
}

# assert_fails WHAT CMD...: CMD must exit non-zero; its output is kept in $FAILED_OUTPUT for further checks.
assert_fails() {
  local what=$1
  shift
  if FAILED_OUTPUT=$("$@" 2>&1); then fail "$what: succeeded but should have failed; output: $FAILED_OUTPUT"; fi
}

# ---------------------------------------------------------------------------------------------------- running

# run_on_cluster CMD...: CMD as the job user against the cluster (srun, sbatch, scontrol...), cwd $TEST_DIR.
run_on_cluster() { "$CLUSTER_SH" exec --cwd "$TEST_DIR" "$@"; }

run_on_cluster_as_root() { "$CLUSTER_SH" exec --root --cwd "$TEST_DIR" "$@"; }

# on_node NODE [--user] CMD...: CMD inside that node's namespaces, outside Slurm (e.g. to look at its local dir).
on_node() { "$CLUSTER_SH" node "$@"; }

# set_plugstack LINE...: rewrite plugstack.conf; read again by the next step. Restored at exit.
set_plugstack() {
  if [ -z "$_PLUGSTACK_SAVED" ]; then
    _PLUGSTACK_SAVED=$(mktemp)
    cp "$DDP_CLUSTER_PLUGSTACK" "$_PLUGSTACK_SAVED"
    # shellcheck disable=SC2016  # expanded at exit
    on_exit 'cp "$_PLUGSTACK_SAVED" "$DDP_CLUSTER_PLUGSTACK"; rm -f "$_PLUGSTACK_SAVED"'
  fi
  "$CLUSTER_SH" plugstack "$@"
}

# job_state JOBID: the state while slurmctld keeps the job (MinJobAge), then from the job completion log.
job_state() {
  local s
  s=$(run_on_cluster scontrol show job -o "$1" 2>/dev/null | grep -o 'JobState=[A-Z_]*' || true)
  if [ -z "$s" ]; then
    s=$(grep "^JobId=$1 " "$DDP_CLUSTER_LOGS/jobcomp.log" 2>/dev/null | tail -n 1 | grep -o 'JobState=[A-Z_]*' || true)
  fi
  echo "${s#JobState=}"
}

# wait_job JOBID [SECONDS]: wait until the job has ended and print its final state (COMPLETED, FAILED...).
# Polls quickly: `sbatch --wait` backs off to 10 s and more between polls.
wait_job() {
  local id=$1 limit=${2:-120} end state
  end=$((SECONDS + limit))
  while :; do
    state=$(job_state "$id")
    case $state in
      COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE | PREEMPTED)
        echo "$state"; return 0 ;;
    esac
    [ "$SECONDS" -lt "$end" ] || fail "job $id still ${state:-unknown} after ${limit} s"
    sleep 0.2
  done
}

# submit [VAR=VALUE...] ARGS...: sbatch --parsable ARGS, with the variables in the job's environment (sbatch
# exports its own); prints the job id. Jobs still running at exit are cancelled, so a failed test does not leave
# the next one waiting for resources (submit runs in a subshell: the ids go through a file).
submit() {
  local vars=() id
  while [[ ${1:-} =~ ^[A-Za-z_][A-Za-z0-9_]*= ]]; do vars+=("$1"); shift; done
  id=$(run_on_cluster env "${vars[@]}" sbatch --parsable "$@" | cut -d';' -f1)
  echo "$id" >>"$_JOBS_FILE"
  echo "$id"
}

# resume_nodes: a failure in user_init drains the node in a batch job; put every node back in service.
resume_nodes() {
  local drained
  drained=$(run_on_cluster sinfo -h -N -t drain,drained,draining,down -o '%N' | sort -u | paste -sd, -)
  [ -z "$drained" ] || run_on_cluster_as_root scontrol update nodename="$drained" state=resume
}

# stage FILE...: copy files into $TEST_DIR (readable by the job user), print the copies' paths.
stage() {
  local f
  for f in "$@"; do
    install -m 0755 -o "$DDP_CLUSTER_USER" "$f" "$TEST_DIR/"
    echo "$TEST_DIR/$(basename "$f")"
  done
}

# on_exit CMD: run CMD (a string) at exit, in reverse order of registration.
on_exit() { _CLEANUPS=("$1" "${_CLEANUPS[@]}"); }

_run_cleanups() {
  local rc=$? c
  for c in "${_CLEANUPS[@]}"; do eval "$c" || true; done
  exit "$rc"
}

# ---------------------------------------------------------------------------------------------------- set-up

[ "$(id -u)" -eq 0 ] || skip "needs root: the test cluster runs slurmd in network namespaces"
_env=$("$CLUSTER_SH" env 2>&1) || fail "no test cluster: $_env (the ddp_cluster fixture runs cluster.sh up)"
eval "$_env"
unset _env
trap _run_cleanups EXIT
TEST_DIR=$(mktemp -d "$DDP_CLUSTER_SHARED/$TEST_NAME.XXXXXX")
chown "$DDP_CLUSTER_USER:" "$TEST_DIR"
chmod 0755 "$TEST_DIR"
# shellcheck disable=SC2016  # expanded at exit
on_exit 'rm -rf "$TEST_DIR"'
_JOBS_FILE=$TEST_DIR/.submitted-jobs
# shellcheck disable=SC2016  # expanded at exit
on_exit '[ ! -s "$_JOBS_FILE" ] || run_on_cluster_as_root scancel $(cat "$_JOBS_FILE") 2>/dev/null'
