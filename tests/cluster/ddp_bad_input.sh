#!/usr/bin/env bash
# Bad input ends the step with one clear line and a non-zero exit, never crashes srun or slurmstepd, and never
# affects steps without --ddp: bad option values (srun and sbatch), bad plugstack arguments, a port range in the
# ephemeral range, an unresolvable master, an unwritable snapshot directory.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
[ -n "$DDP_PLUGIN" ] || skip "the plugin is not built"

ddp_lines() { echo "$1" | grep -c 'ddp: ' || true; }

check_bad_options() {
  assert_fails "unknown backend" run_on_cluster srun --ddp=tcp -N1 true
  assert_contains "$FAILED_OUTPUT" "ddp: unknown --ddp backend 'tcp'; use one of auto|gloo|nccl|mpi, or off" "backend message"
  assert_fails "privileged port" run_on_cluster srun --ddp --ddp-port=80 -N1 true
  assert_contains "$FAILED_OUTPUT" "ddp: --ddp-port value '80' is not a whole number from 1024 to 65535" "port message"
  printf '#!/bin/sh\n#SBATCH --ddp=tpc\ntrue\n' >"$TEST_DIR/bad.sbatch"
  assert_fails "sbatch with a bad #SBATCH --ddp" run_on_cluster sbatch "$TEST_DIR/bad.sbatch"
  assert_contains "$FAILED_OUTPUT" "unknown --ddp backend 'tpc'" "sbatch message"
}

check_bad_plugstack() {
  set_plugstack "required $DDP_PLUGIN port_range=20000-29999 colour=blue"
  assert_fails "unknown plugstack key" run_on_cluster srun --ddp -N1 true
  assert_contains "$FAILED_OUTPUT" \
    "ddp: plugstack argument 'colour=blue' in $DDP_CLUSTER_PLUGSTACK: unknown key 'colour'; known keys:" "plugstack message"
  assert_eq 1 "$(ddp_lines "$FAILED_OUTPUT")" "one line: $FAILED_OUTPUT"
  run_on_cluster srun -N2 -n2 true || fail "a step without --ddp must not suffer from a bad plugstack argument"

  set_plugstack "required $DDP_PLUGIN port_range=40000-40999"
  assert_fails "port range in the ephemeral range" run_on_cluster srun --ddp --resv-ports=0 -N2 -n4 true
  assert_contains "$FAILED_OUTPUT" "ddp: port_range=40000-40999 in plugstack.conf overlaps the kernel's ephemeral port range" \
    "ephemeral message"
  assert_eq 1 "$(ddp_lines "$FAILED_OUTPUT")" "a step-wide problem is reported once: $FAILED_OUTPUT"
  run_on_cluster srun --ddp --resv-ports=0 --ddp-port=29500 -N2 -n2 true || fail "an explicit port needs no port_range"
  run_on_cluster srun --ddp -N2 -n2 true || fail "reserved ports need no port_range"
  set_plugstack "required $DDP_PLUGIN"
}

check_unresolvable_master() {
  # node1 vanishes from name resolution (all nodes share /etc/hosts); Slurm itself uses NodeAddr.
  cp /etc/hosts "$TEST_DIR/hosts.saved"
  on_exit "cp '$TEST_DIR/hosts.saved' /etc/hosts"
  # Rewritten in place, not renamed: /etc/hosts may be a bind mount (containers, tests/stacks/root.sh).
  sed '/[[:space:]]node1[[:space:]]*#/d; /[[:space:]]node1$/d' "$TEST_DIR/hosts.saved" >/etc/hosts
  assert_fails "unresolvable master" run_on_cluster srun --ddp -N2 -n2 true
  assert_contains "$FAILED_OUTPUT" "ddp: MASTER_ADDR 'node1' (the step's first node) does not resolve on this node" \
    "resolution message"
  assert_contains "$FAILED_OUTPUT" "add it to DNS or /etc/hosts on every node" "the fix"
  cp "$TEST_DIR/hosts.saved" /etc/hosts
}

check_snapshot_dir() {
  assert_fails "unwritable snapshot directory" run_on_cluster srun --ddp --ddp-snapshot-dir=/root/snapshots -N1 true
  assert_contains "$FAILED_OUTPUT" "ddp: snapshot directory '/root/snapshots' cannot be created" "snapshot message"
  local out dir
  out=$(run_on_cluster srun --ddp --ddp-snapshot-dir="$TEST_DIR/snap/%u-%j" -N2 -n2 printenv DDP_SNAPSHOT_DIR | sort -u)
  assert_match "$out" "^$TEST_DIR/snap/$DDP_CLUSTER_USER-[0-9]+$" "exported snapshot directory"
  dir=$out
  assert_eq "$DDP_CLUSTER_USER 700" "$(stat -c '%U %a' "$dir")" "created as the user, private"
}

check_daemons_survive() {
  run_on_cluster srun -N2 -n2 true || fail "steps no longer run after the failures"
  assert_eq "" "$(run_on_cluster sinfo -h -t drain,drained,down -o %N)" "no node drained or down"
  "$CLUSTER_SH" pgrep -x slurmctld >/dev/null || fail "slurmctld died"
  assert_eq "$DDP_CLUSTER_NNODES" "$("$CLUSTER_SH" pgrep -x slurmd | wc -l)" "every slurmd alive"
}

check_bad_options
check_bad_plugstack
check_unresolvable_master
check_snapshot_dir
check_daemons_survive
pass "bad options, plugstack arguments, port range, master name, snapshot directory"
