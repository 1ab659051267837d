#!/usr/bin/env bash
# MASTER_PORT: two steps that run at once on the same nodes get different ports, both when they come from Slurm's
# reserved ports (every srun gets some on this cluster) and when they are derived from the step ids
# (--resv-ports=0); --ddp-port wins.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
[ -n "$DDP_PLUGIN" ] || skip "the plugin is not built"

# Two concurrent 2-node steps inside one job: each prints its port after both have started (a shared barrier
# file), so they are known to overlap in time.
concurrent_ports() {  # extra srun options
  local job
  job=$(submit -N2 --ntasks-per-node=2 --wrap "
    step() { srun --ddp $* -N2 -n2 --exact sh -c 'touch $TEST_DIR/started.\$SLURM_STEP_ID.\$SLURM_PROCID; end=\$((\$(date +%s) + 60));
             while [ \$(ls $TEST_DIR | grep -c started) -lt 4 ] && [ \$(date +%s) -lt \$end ]; do sleep 0.1; done;
             echo port=\$MASTER_PORT step=\$SLURM_STEP_ID'; }
    step & step & wait")
  assert_eq COMPLETED "$(wait_job "$job")" "state of job $job"
  rm -f "$TEST_DIR"/started.*
  sort -u "$TEST_DIR/slurm-$job.out"
}

check_derived_ports() {
  local out
  out=$(concurrent_ports --resv-ports=0)
  assert_eq 2 "$(echo "$out" | grep -c '^port=2')" "one derived port per step: $out"
  assert_eq 2 "$(echo "$out" | cut -d' ' -f1 | sort -u | wc -l)" "two concurrent steps get different ports: $out"
}

check_reserved_ports() {
  local out port
  out=$(concurrent_ports)
  assert_eq 2 "$(echo "$out" | cut -d' ' -f1 | sort -u | wc -l)" "reserved ports differ: $out"
  for port in $(echo "$out" | sed -n 's/^port=\([0-9]*\).*/\1/p'); do
    if [ "$port" -lt 12000 ] || [ "$port" -gt 12999 ]; then fail "port $port is not from MpiParams=ports=12000-12999"; fi
  done
}

check_user_port() {
  assert_eq "29876 29876" "$(run_on_cluster srun --ddp --ddp-port=29876 -N2 -n2 printenv MASTER_PORT | paste -sd' ')" \
    "--ddp-port on every task"
}

check_derived_ports
check_reserved_ports
check_user_port
pass "derived and reserved ports differ between concurrent steps; --ddp-port"
