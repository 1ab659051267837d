#!/usr/bin/env bash
# The ParallelCluster leg: slurm-ddp installed and run on a head node like AWS ParallelCluster's, as its admin and
# users would. Run inside the pcluster root (tests/stacks/pcluster.sh test TARBALL: Slurm 25.11 built from source in
# /opt/slurm, the AMI's compilers and hwloc headers, no cmake), seen through an overlay, so that every run starts
# from the same fresh head node.
#
#   leg.sh TARBALL [FEATURE.sh ...]      (FEATURE.sh: only these after the head-node action; default: all)
#
# Brings up a 3-node cluster of that Slurm (slurmctld on the "head node", a slurmd per node sharing /opt/slurm, the
# configuration in /opt/slurm/etc, plugstack.conf including plugstack.conf.d/* after pyxis's snippet), then runs one
# script per feature, each on that cluster: the head-node action from the tarball (bad input first), the compute-node
# action, the torchrun contract and Slurm 25.11's SPANK behaviour (tests/cluster's scripts), the templates through
# sbatch, a reinstall and an upgrade while steps run, the PCS and site layouts, and the cost of --ddp on srun. The
# cluster goes down at the end, also on failure.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
CLUSTER_SH=$REPO/tests/cluster/cluster.sh
export PCLUSTER_TARBALL=${1:?usage: leg.sh TARBALL}
export DDP_CLUSTER_SLURM_PREFIX=/opt/slurm
export PATH=/opt/slurm/bin:/opt/slurm/sbin:$PATH
export DDP_CLUSTER_DIR=/tmp/ddp-cluster
[ -x /opt/slurm/sbin/slurmd ] || { echo "leg.sh: no Slurm in /opt/slurm: run tests/stacks/pcluster.sh build-slurm" >&2; exit 1; }
t0=$SECONDS

# ParallelCluster's layout: slurm.conf in /opt/slurm/etc (Slurm's compiled-in place, so clients need no SLURM_CONF),
# plugstack.conf including plugstack.conf.d/*, pyxis's snippet there (a stand-in with pyxis's name and effect: pyxis
# is built on ParallelCluster's AMIs and enabled by moving its snippet in place).
mkdir -p /opt/slurm/etc/plugstack.conf.d /opt/slurm/lib/slurm
echo "include /opt/slurm/etc/plugstack.conf.d/*" >/opt/slurm/etc/plugstack.conf
gcc -shared -fPIC -O2 -I/opt/slurm/include -o /opt/slurm/lib/slurm/spank_pyxis.so "$REPO/tests/cluster/pyxis_standin.c"
echo "required /opt/slurm/lib/slurm/spank_pyxis.so" >/opt/slurm/etc/plugstack.conf.d/pyxis.conf
ln -sfn "$DDP_CLUSTER_DIR/etc/slurm.conf" /opt/slurm/etc/slurm.conf

echo "leg.sh: $(. /etc/os-release && echo "$PRETTY_NAME") root as a ParallelCluster head node: $(slurmd -V), $(gcc --version | head -n 1), cmake: $(command -v cmake || echo none)"
trap '"$CLUSTER_SH" down >/dev/null 2>&1 || true' EXIT
"$CLUSTER_SH" up --nodes 3 --plugstack /opt/slurm/etc/plugstack.conf

failed=()
run() {  # SCRIPT: one feature; its output as it runs, its verdict kept
  local name=$1 s=$SECONDS rc=0
  echo "leg.sh: ===== $name"
  bash "$HERE/$name" || rc=$?
  case $rc in
    0) echo "leg.sh: $name passed in $((SECONDS - s)) s" ;;
    77) echo "leg.sh: $name skipped" ;;
    *) echo "leg.sh: $name FAILED (exit $rc) after $((SECONDS - s)) s"; failed+=("$name") ;;
  esac
}
# The action comes first: every later feature runs what it installed.
run head_node_action.sh
if [ ${#failed[@]} -gt 0 ]; then
  echo "leg.sh: the head-node action failed; nothing else can run" >&2
  exit 1
fi
features=("${@:2}")
[ ${#features[@]} -gt 0 ] || features=(compute_node_action.sh contract.sh templates.sh upgrade.sh layouts.sh srun_cost.sh)
for feature in "${features[@]}"; do run "$feature"; done
echo "leg.sh: ParallelCluster leg done in $((SECONDS - t0)) s${failed[*]:+; FAILED: ${failed[*]}}"
[ ${#failed[@]} -eq 0 ]
