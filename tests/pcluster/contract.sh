#!/usr/bin/env bash
# The torchrun contract and Slurm 25.11's SPANK behaviour, with the ddp.so the head-node action installed: the cluster
# tests that every stack runs (tests/cluster), here against ParallelCluster's Slurm and layout. spank_versions.sh
# checks 25.11 against spank_plugin/slurm_versions.h with a probe plugin built here with gcc, as an admin would.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
CLUSTER_TESTS=$HERE/../cluster
eval "$("$CLUSTER_TESTS/cluster.sh" env)"
export DDP_PLUGIN=/opt/slurm/lib/slurm/ddp.so
[ -f "$DDP_PLUGIN" ] || { echo "FAIL contract: no $DDP_PLUGIN"; exit 1; }
# What `cluster.sh env` gives the tests as the plugin's path: the installed one.
echo "$DDP_PLUGIN" >"$DDP_CLUSTER_DIR/etc/plugin"
probe_dir=$(mktemp -d)
trap 'rm -rf "$probe_dir"' EXIT
gcc -shared -fPIC -O2 -I/opt/slurm/include -o "$probe_dir/spank_probe.so" "$CLUSTER_TESTS/spank_probe.c"
chmod 0755 "$probe_dir" "$probe_dir/spank_probe.so"
export DDP_SPANK_PROBE=$probe_dir/spank_probe.so
# The admin's defaults of the action's plugstack line reach every task: the snapshot directory's template, expanded.
snippet=/opt/slurm/etc/plugstack.conf.d/zz-ddp.conf
line=$(cat "$snippet")
case $line in *" snapshot_dir=$DDP_CLUSTER_SHARED/%u/ddp-snapshots/%x-%j"*) ;; *) echo "FAIL contract: the snippet is $line"; exit 1 ;; esac
dirs=$(cd "$DDP_CLUSTER_SHARED" && setpriv --reuid="$DDP_CLUSTER_USER" --regid="$DDP_CLUSTER_USER" --init-groups \
  env -i PATH="$PATH" SLURM_CONF="$SLURM_CONF" srun -J contract --ddp -N2 -n2 printenv DDP_SNAPSHOT_DIR | sort -u) || true
job_dir="$DDP_CLUSTER_SHARED/$DDP_CLUSTER_USER/ddp-snapshots/contract-"
case $dirs in "$job_dir"[0-9]*) ;; *) echo "FAIL contract: DDP_SNAPSHOT_DIR from the admin's snapshot_dir: [$dirs], not $job_dir<job id>"; exit 1 ;; esac
echo "contract: the admin's snapshot_dir reached the tasks: $dirs"
# tests/cluster's scripts expect ddp.so's line without admin defaults (their expected environments): for them, the
# snippet names the plugin alone; it is put back after. They rewrite the plugstack file and put it back themselves.
echo "required $DDP_PLUGIN" >"$snippet"
trap 'echo "$line" >"$snippet"; rm -rf "$probe_dir"' EXIT
failed=()
for test in spank_versions.sh ddp_env.sh ddp_sbatch.sh ddp_bad_input.sh ddp_torch.sh; do
  echo "contract: --- $test"
  bash "$CLUSTER_TESTS/$test" || failed+=("$test")
done
assert_plugstack=$(cat "$DDP_CLUSTER_PLUGSTACK")
[ "$assert_plugstack" = "include /opt/slurm/etc/plugstack.conf.d/*" ] ||
  { echo "FAIL contract: plugstack.conf was not put back: $assert_plugstack"; exit 1; }
[ ${#failed[@]} -eq 0 ] || { echo "FAIL contract: ${failed[*]}"; exit 1; }
echo "PASS contract: spank_versions, ddp_env, ddp_sbatch, ddp_bad_input, ddp_torch on Slurm $(srun --version | awk '{print $2}')"
