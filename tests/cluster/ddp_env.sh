#!/usr/bin/env bash
# srun --ddp on 2 nodes x 2 tasks exports torchrun's contract, right for every task, computed from the step
# (not the job), with the user's OMP_NUM_THREADS kept and stale contract values replaced; steps without --ddp
# get nothing; a heterogeneous step (srun A : B) is one world; --ddp-verbose prints one line per task.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
[ -n "$DDP_PLUGIN" ] || skip "the plugin is not built"
printer=$(stage "$(dirname "$0")/print_ddp_env.sh")

# Field N (1-based, after the host) of the line of rank R, e.g. value_of "$out" 3 MASTER_PORT.
value_of() { echo "$1" | awk -v r="RANK=$2" -v n="$3=" '$2 == r { for (i = 2; i <= NF; i++) if (index($i, n) == 1) print substr($i, length(n) + 1) }'; }

check_two_by_two() {
  local out port job_step
  out=$(run_on_cluster srun --ddp -N2 --ntasks-per-node=2 --cpus-per-task=1 "$printer" | sort -t= -k2 -n)
  port=$(value_of "$out" 0 MASTER_PORT)
  # The test cluster reserves ports (MpiParams=ports=12000-12999), and srun gives every step some.
  assert_match "$port" '^12[0-9]{3}$' "MASTER_PORT from the step's reserved ports"
  job_step=$(value_of "$out" 0 TORCHELASTIC_RUN_ID)
  assert_match "$job_step" '^[0-9]+\.0$' "TORCHELASTIC_RUN_ID of step 0"
  local expected="" rank node local_rank
  for rank in 0 1 2 3; do
    node=$((rank / 2)); local_rank=$((rank % 2))
    expected+="node$((node + 1)) RANK=$rank LOCAL_RANK=$local_rank WORLD_SIZE=4 LOCAL_WORLD_SIZE=2 NODE_RANK=$node"
    expected+=" GROUP_RANK=$node GROUP_WORLD_SIZE=2 ROLE_NAME=default ROLE_RANK=$rank ROLE_WORLD_SIZE=4 MASTER_ADDR=node1"
    expected+=" MASTER_PORT=$port TORCHELASTIC_RUN_ID=$job_step TORCHELASTIC_RESTART_COUNT=0"
    expected+=" TORCHELASTIC_MAX_RESTARTS=0 TORCHELASTIC_USE_AGENT_STORE=False DDP_BACKEND=auto OMP_NUM_THREADS=1"
    expected+=" USE_LIBUV=0 DDP_SNAPSHOT_DIR=-"$'\n'
  done
  assert_eq "${expected%$'\n'}" "$(echo "$out" | sort -k2,2V)" "environment of every task"
}

check_step_smaller_than_job() {
  # A 2-node, 4-task allocation whose second step uses one node and one task: the values are the step's.
  local job out
  job=$(submit -N2 -n4 --wrap "srun --ddp -N1 -n1 -w node2 $printer; srun --ddp -N2 -n2 --cpus-per-task=2 $printer")
  assert_eq COMPLETED "$(wait_job "$job")" "state of job $job"
  out=$(cat "$TEST_DIR/slurm-$job.out")
  assert_contains "$out" "node2 RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 LOCAL_WORLD_SIZE=1 NODE_RANK=0 GROUP_RANK=0 GROUP_WORLD_SIZE=1" \
    "one-task step of a four-task job"
  assert_contains "$out" "MASTER_ADDR=node2 " "master of a step on node2 only"
  assert_contains "$out" "RANK=1 LOCAL_RANK=0 WORLD_SIZE=2 LOCAL_WORLD_SIZE=1 NODE_RANK=1" "second task of the 2x1 step"
  assert_contains "$out" "OMP_NUM_THREADS=2" "OMP_NUM_THREADS from --cpus-per-task"
  assert_match "$out" "TORCHELASTIC_RUN_ID=$job\.1 " "run id of the second step"
}

check_user_values() {
  local out
  out=$(run_on_cluster env OMP_NUM_THREADS=7 USE_LIBUV=1 RANK=99 WORLD_SIZE=1 MASTER_ADDR=stale \
        srun --ddp=gloo -N2 -n2 "$printer" | sort)
  assert_contains "$out" "node1 RANK=0 " "stale RANK replaced"
  assert_contains "$out" "WORLD_SIZE=2 " "stale WORLD_SIZE replaced"
  assert_not_contains "$out" "MASTER_ADDR=stale" "stale MASTER_ADDR replaced"
  assert_contains "$out" "DDP_BACKEND=gloo OMP_NUM_THREADS=7 USE_LIBUV=1 " "backend hint, the user's OMP_NUM_THREADS and USE_LIBUV"
}

check_without_ddp() {
  assert_eq "node1 RANK=- LOCAL_RANK=- WORLD_SIZE=-" \
    "$(run_on_cluster srun -N1 -n1 "$printer" | cut -d' ' -f1-4)" "a step without --ddp"
}

check_derived_port() {
  local err
  err=$(run_on_cluster srun --ddp --ddp-verbose --resv-ports=0 -N2 -n2 true 2>&1)
  assert_eq 2 "$(echo "$err" | grep -c '(port from hash): .* MASTER_PORT=2[0-9]\{4\} ')" "derived port in 20000-29999: $err"
}

check_heterogeneous_step() {
  # srun A : B is one step per component, each with its own job id and task count in Slurm's SPANK items; torch
  # needs one world: ranks 0-2 of 3 on 2 nodes, one run id and one port (derived here, so from the het job's id).
  local out run_id port
  out=$(run_on_cluster srun --ddp --resv-ports=0 -N1 -n1 "$printer" : --resv-ports=0 -N1 -n2 "$printer" | sort -k2,2V)
  run_id=$(value_of "$out" 0 TORCHELASTIC_RUN_ID)
  port=$(value_of "$out" 0 MASTER_PORT)
  assert_match "$port" '^2[0-9]{4}$' "a derived port: $out"
  local expected="" rank node nodes=(0 1 1) local_ranks=(0 0 1) local_sizes=(1 2 2)
  for rank in 0 1 2; do
    node=${nodes[rank]}
    expected+="node$((node + 1)) RANK=$rank LOCAL_RANK=${local_ranks[rank]} WORLD_SIZE=3 LOCAL_WORLD_SIZE=${local_sizes[rank]}"
    expected+=" NODE_RANK=$node GROUP_RANK=$node GROUP_WORLD_SIZE=2 ROLE_NAME=default ROLE_RANK=$rank ROLE_WORLD_SIZE=3"
    expected+=" MASTER_ADDR=node1 MASTER_PORT=$port TORCHELASTIC_RUN_ID=$run_id TORCHELASTIC_RESTART_COUNT=0"
    expected+=" TORCHELASTIC_MAX_RESTARTS=0 TORCHELASTIC_USE_AGENT_STORE=False DDP_BACKEND=auto OMP_NUM_THREADS=1"
    expected+=" USE_LIBUV=0 DDP_SNAPSHOT_DIR=-"$'\n'
  done
  assert_eq "${expected%$'\n'}" "$out" "environment of every task of a heterogeneous step"
}

check_verbose() {
  local err
  err=$(run_on_cluster srun --ddp --ddp-verbose --ddp-port=23456 -N2 -n2 true 2>&1 | sort)
  assert_eq 2 "$(echo "$err" | grep -c '^ddp: rank [01] on node[12] (port from user): RANK=')" "verbose lines: $err"
  assert_contains "$err" "ddp: rank 1 on node2 (port from user): RANK=1 LOCAL_RANK=0 WORLD_SIZE=2" "verbose line of rank 1"
  assert_contains "$err" "MASTER_PORT=23456 " "verbose port"
}

check_two_by_two
check_step_smaller_than_job
check_user_values
check_without_ddp
check_derived_port
check_heterogeneous_step
check_verbose
pass "contract on 2x2, step vs job, user values, no --ddp, derived port, heterogeneous step, verbose"
