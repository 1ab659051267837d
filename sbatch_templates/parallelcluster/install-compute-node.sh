#!/usr/bin/env bash
# ParallelCluster OnNodeConfigured action for compute nodes. /opt/slurm is shared from the head node, where
# install-head-node.sh put ddp.so and the plugstack snippet; this checks that every compute node sees them and
# has what the plugin and ddp-train load at run time, so a broken node fails its bootstrap instead of a job.
#   install-compute-node.sh [--slurm-prefix /opt/slurm] [--plugin-dir DIR]
set -euo pipefail
prefix=/opt/slurm plugin_dir=""
die() { echo "install-compute-node: $*" >&2; exit 1; }
while [ $# -gt 0 ]; do
  case "$1" in
    --slurm-prefix) prefix=${2:?}; shift 2 ;;
    --plugin-dir) plugin_dir=${2:?}; shift 2 ;;
    *) die "unknown argument '$1'" ;;
  esac
done
[ -n "$plugin_dir" ] || plugin_dir=$(dirname "$(find "$prefix/lib" "$prefix/lib64" -maxdepth 3 -name auth_munge.so 2>/dev/null | head -n 1)")
[ -f "$plugin_dir/ddp.so" ] || die "no ddp.so in $plugin_dir: run install-head-node.sh on the head node first"
missing=$(ldd "$plugin_dir/ddp.so" | awk '/not found/ {print $1}')
[ -z "$missing" ] || die "ddp.so cannot load on $(hostname): missing $missing"
if command -v fi_info >/dev/null 2>&1 && ! fi_info -p efa >/dev/null 2>&1; then
  echo "install-compute-node: warning: no EFA provider on $(hostname) (fi_info -p efa); NCCL will fall back to sockets" >&2
fi
echo "install-compute-node: $(hostname) sees $plugin_dir/ddp.so"
