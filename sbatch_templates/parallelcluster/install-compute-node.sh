#!/usr/bin/env bash
# ParallelCluster OnNodeConfigured action for compute nodes. /opt/slurm is shared from the head node, where
# pcluster-head-node.sh put ddp.so and the plugstack snippet, and /opt/slurm-ddp holds the programs when the cluster
# shares it (SharedStorage). This checks that the node sees them and has every library they load, so that a broken
# node fails its bootstrap instead of a job; it changes nothing.
#   install-compute-node.sh [--slurm-prefix /opt/slurm] [--plugin-dir DIR] [--programs DIR]
# --programs: where ddp-train and the tools are (default /opt/slurm-ddp/bin; checked when it exists).
set -euo pipefail
PROGRAM=install-compute-node
# shellcheck source=install_lib.sh
source "$(dirname "$0")/install_lib.sh"
prefix=/opt/slurm plugin_dir="" programs=/opt/slurm-ddp/bin
while [ $# -gt 0 ]; do
  case "$1" in
    --slurm-prefix) prefix=${2:?}; shift 2 ;;
    --plugin-dir) plugin_dir=${2:?}; shift 2 ;;
    --programs) programs=${2:?}; shift 2 ;;
    *) die "unknown argument '$1'" ;;
  esac
done
# One of lib and lib64 is usually missing: find's complaint about it is no failure here.
[ -n "$plugin_dir" ] || plugin_dir=$(dirname "$(find "$prefix/lib" "$prefix/lib64" -maxdepth 3 -name auth_munge.so 2>/dev/null | head -n 1 || true)")
[ -f "$plugin_dir/ddp.so" ] || die "no ddp.so in $plugin_dir: run install-head-node.sh on the head node first"

# What a library's name says to install: hwloc's from the system, LibTorch's from the Python it was built against.
fix_for() {  # SONAME FILE
  case $1 in
    libhwloc.so*) install_command hwloc-runtime ;;
    libtorch* | libc10* | libgloo* | libshm* | libcu* | libnccl* | libnv*)
      echo "install the PyTorch $2 was built against at the same path on this node, or put it on shared storage" ;;
    *) echo "install the package that has $1 on this node" ;;
  esac
}

check_loads() {  # FILE
  local missing lib out
  out=$(ldd "$1" 2>&1) || true
  # "NAME => not found", or the loader's own error ("error while loading shared libraries: PATH: file too short").
  missing=$(awk '/not found/ {print $1} /error while loading shared libraries/ {n = split($0, f, ": "); print f[n - 1]}' <<<"$out")
  [ -z "$missing" ] && return 0
  for lib in $missing; do
    echo "$PROGRAM: $1 cannot load on $(hostname): $lib not found: $(fix_for "$lib" "$1")" >&2
  done
  return 1
}

status=0
check_loads "$plugin_dir/ddp.so" || status=1
if [ -d "$programs" ]; then
  for program in "$programs"/ddp-train "$programs"/ddp-why "$programs"/ddp-topo; do
    [ ! -e "$program" ] || check_loads "$program" || status=1
  done
fi
[ "$status" = 0 ] || die "this node cannot run slurm-ddp; install what is named above and run this again"
if command -v fi_info >/dev/null 2>&1 && ! fi_info -p efa >/dev/null 2>&1; then
  echo "$PROGRAM: warning: no EFA provider on $(hostname) (fi_info -p efa); NCCL will fall back to sockets" >&2
fi
echo "$PROGRAM: $(hostname) sees $plugin_dir/ddp.so$([ ! -x "$programs/ddp-train" ] || echo " and $programs/ddp-train")"
