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
# The tests rewrite the plugstack file and put it back: ParallelCluster's include line, with pyxis's snippet and ours.
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
