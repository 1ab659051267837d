#!/usr/bin/env bash
# #SBATCH --ddp reaches every srun of the script; srun's own option overrides it (including --ddp=off); the batch
# step itself gets nothing, so nothing leaks into later steps; the admin's remember_bad_nodes=no reaches ddp-restart in
# the batch script.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
[ -n "$DDP_PLUGIN" ] || skip "the plugin is not built"
printer=$(stage "$(dirname "$0")/print_ddp_env.sh")

cat >"$TEST_DIR/job.sbatch" <<JOB
#!/bin/bash
#SBATCH -N2 -n2
#SBATCH --ddp=gloo
#SBATCH --ddp-port=24680
echo "batch: RANK=\${RANK-unset} MASTER_PORT=\${MASTER_PORT-unset}"
echo "remember: \${DDP_REMEMBER_BAD_NODES-unset} \${SLURM_SPANK_DDP_REMEMBER_BAD_NODES-unset}"
srun $printer | sed 's/^/inherited: /'
srun --ddp=nccl --ddp-port=auto $printer | sed 's/^/overridden: /'
srun --ddp=off $printer | sed 's/^/off: /'
srun --ddp $printer | sed 's/^/bare: /'
JOB
chown "$DDP_CLUSTER_USER" "$TEST_DIR/job.sbatch"
job=$(submit "$TEST_DIR/job.sbatch")
assert_eq COMPLETED "$(wait_job "$job")" "state of job $job"
out=$(cat "$TEST_DIR/slurm-$job.out")

assert_contains "$out" "batch: RANK=unset MASTER_PORT=unset" "the batch step gets nothing"
assert_eq 2 "$(echo "$out" | grep -c '^inherited: node[12] RANK=[01] .*MASTER_PORT=24680 .*DDP_BACKEND=gloo ')" \
  "#SBATCH options reach srun: $out"
assert_eq 2 "$(echo "$out" | grep '^overridden: ' | grep -v 'MASTER_PORT=24680' | grep -c 'DDP_BACKEND=nccl ')" \
  "srun's options override #SBATCH: $out"
assert_eq 2 "$(echo "$out" | grep -c '^off: node[12] RANK=- ')" "--ddp=off: $out"
# A bare --ddp after #SBATCH --ddp=gloo: the optional argument arrives as Slurm's "(null)"; the admin default wins.
assert_eq 2 "$(echo "$out" | grep -c '^bare: .*DDP_BACKEND=auto ')" "bare --ddp: $out"
assert_contains "$out" "remember: unset unset" "ddp-restart remembers bad nodes unless the admin says no"

# The admin's remember_bad_nodes=no reaches ddp-restart in the batch script, also under --export=NONE (as its
# job-control name).
set_plugstack "required $DDP_PLUGIN remember_bad_nodes=no"
cat >"$TEST_DIR/remember.sbatch" <<'JOB'
#!/bin/bash
#SBATCH -N1 -n1
#SBATCH --ddp
echo "remember: ${DDP_REMEMBER_BAD_NODES-unset} ${SLURM_SPANK_DDP_REMEMBER_BAD_NODES-unset}"
JOB
chown "$DDP_CLUSTER_USER" "$TEST_DIR/remember.sbatch"
for export in ALL NONE; do
  job=$(submit --export="$export" "$TEST_DIR/remember.sbatch")
  assert_eq COMPLETED "$(wait_job "$job")" "state of job $job (--export=$export)"
  out=$(cat "$TEST_DIR/slurm-$job.out")
  assert_match "$out" "remember: (0|unset) 0" "remember_bad_nodes=no under --export=$export"
  [ "$export" = NONE ] || assert_contains "$out" "remember: 0 0" "remember_bad_nodes=no under --export=ALL"
done
pass "#SBATCH --ddp inherited, overridden, turned off; batch step clean; the admin's remember_bad_nodes=no reaches the batch script"
