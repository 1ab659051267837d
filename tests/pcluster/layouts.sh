#!/usr/bin/env bash
# Where install-head-node.sh puts ddp.so and its plugstack snippet on other layouts, found as it finds them (its
# --check prints what it found and builds nothing; the install itself is the code the head-node action ran):
# - AWS PCS: Slurm under /opt/aws/pcs/scheduler/slurm-<ver>, its configuration and plugstack.conf.d in
#   /etc/aws/pcs/scheduler/slurm-<ver>/ (this Slurm bound at those paths, in a mount namespace of the test's own);
# - a site's own prefix, found from srun on PATH, with the plugin directory and plugstack file taken from the
#   running Slurm (scontrol show config), not from a file.
set -euo pipefail
# shellcheck source=../cluster/lib.sh
source "$(dirname "$0")/../cluster/lib.sh"
INSTALL=/opt/slurm-ddp/source/sbatch_templates/parallelcluster/install-head-node.sh
SERIES=$(srun --version | awk '{split($2, v, "."); print v[1] "." v[2]}')
PCS=/opt/aws/pcs/scheduler/slurm-$SERIES
PCS_ETC=/etc/aws/pcs/scheduler/slurm-$SERIES
SITE=/usr/local/site-slurm
CLEAN_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

# PCS: no srun on PATH, SLURM_CONF names PCS's configuration (its controller is elsewhere: this one does not answer).
# shellcheck disable=SC2016  # expanded by the inner shell
out=$(unshare --mount --propagation private env -i PATH="$CLEAN_PATH" PCS="$PCS" PCS_ETC="$PCS_ETC" INSTALL="$INSTALL" bash -ec '
  mkdir -p "$PCS" "$PCS_ETC/plugstack.conf.d"
  mount --bind /opt/slurm "$PCS"
  printf "ClusterName=pcs\nSlurmctldHost=localhost\nSlurmctldPort=1\nNodeName=n1 CPUs=1\nPartitionName=p Nodes=n1\n" >"$PCS_ETC/slurm.conf"
  echo "include $PCS_ETC/plugstack.conf.d/*" >"$PCS_ETC/plugstack.conf"
  SLURM_CONF=$PCS_ETC/slurm.conf "$INSTALL" --check --require-include' 2>&1) || fail "PCS layout: $out"
echo "$out"
assert_contains "$out" "at $PCS: ddp.so into $PCS/lib/slurm, plugstack $PCS_ETC/plugstack.conf" "PCS layout"

# A site's prefix, srun on PATH, the running Slurm asked for its PluginDir and PlugStackConfig.
# shellcheck disable=SC2016
out=$(unshare --mount --propagation private env -i PATH="$SITE/bin:$CLEAN_PATH" SITE="$SITE" INSTALL="$INSTALL" bash -ec '
  mkdir -p "$SITE"
  mount --bind /opt/slurm "$SITE"
  "$INSTALL" --check --require-include' 2>&1) || fail "site layout: $out"
echo "$out"
assert_contains "$out" "at $SITE: ddp.so into /opt/slurm/lib/slurm, plugstack /opt/slurm/etc/plugstack.conf" "site layout"
pass "PCS: $PCS with $PCS_ETC/plugstack.conf; a site prefix from PATH with the running Slurm's PluginDir and PlugStackConfig"
