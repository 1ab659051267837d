#!/usr/bin/env bash
# The head-node action (pcluster-head-node.sh), run as ParallelCluster runs OnNodeConfigured: as root, with the
# tarball and its SHA-256 and the admin's arguments. First every bad input of the issue, each refused in one line
# with the fix and nothing installed; then the fixes, the install (timed: the fresh figure), the result, and a rerun
# that changes nothing (timed).
set -euo pipefail
# shellcheck source=../cluster/lib.sh
source "$(dirname "$0")/../cluster/lib.sh"
TARBALL=$PCLUSTER_TARBALL
SUM=$(sha256sum "$TARBALL" | cut -d' ' -f1)
ARGS=(port_range=20000-29999 "snapshot_dir=$DDP_CLUSTER_SHARED/%u/ddp-snapshots/%x-%j")
# The action as S3 would hand it: a copy of the script outside the tarball.
ACTION=$TEST_DIR/pcluster-head-node.sh
tar -xzf "$TARBALL" -O slurm-ddp/sbatch_templates/parallelcluster/pcluster-head-node.sh >"$ACTION"
chmod 0755 "$ACTION"

action() { "$ACTION" "$TARBALL" "$@"; }

nothing_installed() {  # WHAT
  local left=""
  [ ! -e /opt/slurm/lib/slurm/ddp.so ] || left+=" /opt/slurm/lib/slurm/ddp.so"
  [ ! -e /opt/slurm/etc/plugstack.conf.d/zz-ddp.conf ] || left+=" zz-ddp.conf"
  [ ! -e /opt/slurm-ddp ] || left+=" /opt/slurm-ddp ($(find /opt/slurm-ddp | head -n 5 | tr '\n' ' '))"
  [ -z "$(find /opt -maxdepth 1 -name '.slurm-ddp.*')" ] || left+=" a work directory in /opt"
  [ -z "$left" ] || fail "$1: something was installed:$left"
}

refused() {  # WHAT EXPECTED-LINE ACTION-ARGS...: the action fails, says EXPECTED-LINE, installs nothing
  local what=$1 expected=$2
  shift 2
  assert_fails "$what" action "$@"
  assert_contains "$FAILED_OUTPUT" "$expected" "$what"
  nothing_installed "$what"
  echo "refused, $what: $(grep -F -- "$expected" <<<"$FAILED_OUTPUT" | head -n 1)"
}

# 1. A tarball whose SHA-256 differs.
refused "a tarball whose SHA-256 differs" "does not have SHA-256 $(printf '%064d' 1) (it is $SUM); nothing was installed" \
  "$(printf '%064d' 1)" "${ARGS[@]}"

# 2. A Slurm prefix without headers (a Slurm installed without them).
mv /opt/slurm/include /opt/slurm/include.away
refused "a Slurm prefix without headers" \
  "no /opt/slurm/include/slurm/spank.h: this Slurm has no headers; give the prefix of a Slurm installed with them" "$SUM" "${ARGS[@]}"
mv /opt/slurm/include.away /opt/slurm/include

# 2b. No hwloc headers (the AMIs have them; a custom AMI may not): the package of this system is named.
mv /usr/include/hwloc.h /usr/include/hwloc.h.away
refused "a head node without the hwloc headers" "missing: the hwloc 2 headers (hwloc.h): apt-get install -y libhwloc-dev" \
  "$SUM" "${ARGS[@]}"
mv /usr/include/hwloc.h.away /usr/include/hwloc.h

# 3. Headers of another Slurm series than the running srun (24.11's version number in 25.11's headers).
cp /opt/slurm/include/slurm/slurm_version.h "$TEST_DIR/slurm_version.h"
sed -i -E 's/^#define SLURM_VERSION_NUMBER 0x[0-9a-fA-F]+/#define SLURM_VERSION_NUMBER 0x180b05/' /opt/slurm/include/slurm/slurm_version.h
running=$(srun --version | awk '{print $2}')
refused "headers of another Slurm series" "Slurm headers in /opt/slurm/include are 24.11.5 but /opt/slurm/bin/srun is $running; install the headers of the running Slurm" \
  "$SUM" "${ARGS[@]}"
cp "$TEST_DIR/slurm_version.h" /opt/slurm/include/slurm/slurm_version.h

# 4. A plugstack.conf that includes no directory.
cp /opt/slurm/etc/plugstack.conf "$TEST_DIR/plugstack.conf"
echo "# no include here" >/opt/slurm/etc/plugstack.conf
refused "a plugstack.conf that includes no directory" \
  "/opt/slurm/etc/plugstack.conf includes no directory: add the line 'include /opt/slurm/etc/plugstack.conf.d/*'" "$SUM" "${ARGS[@]}"
cp "$TEST_DIR/plugstack.conf" /opt/slurm/etc/plugstack.conf

# 5. A Python without torch (python3 without its site packages).
printf '#!/bin/sh\nexec /usr/bin/python3 -S "$@"\n' >"$TEST_DIR/python-without-torch"
chmod 0755 "$TEST_DIR/python-without-torch"
refused "a Python without torch" "$TEST_DIR/python-without-torch cannot import torch: install PyTorch into it" \
  "$SUM" --ddp-train-python "$TEST_DIR/python-without-torch" "${ARGS[@]}"

# 6. ddp-train asked for on a head node without cmake (the AMIs have none): the command that installs it is named.
command -v cmake >/dev/null && fail "the head node has cmake before the test installs it: the root is not the AMI's"
refused "ddp-train without cmake" "missing: cmake (LibTorch's package is a CMake one): apt-get install -y cmake" \
  "$SUM" --ddp-train-python /usr/bin/python3 "${ARGS[@]}"

# The fix the line names (offline: the root's apt cache holds cmake), then the install.
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends cmake >/dev/null ||
  fail "apt-get install cmake from the root's cache failed"
start=$SECONDS
action "$SUM" --ddp-train-python /usr/bin/python3 "${ARGS[@]}" >"$TEST_DIR/install.log" 2>&1 ||
  fail "the action after the fixes: $(tail -n 30 "$TEST_DIR/install.log")"
fresh=$((SECONDS - start))
cat "$TEST_DIR/install.log"
assert_eq "required /opt/slurm/lib/slurm/ddp.so ${ARGS[*]}" "$(cat /opt/slurm/etc/plugstack.conf.d/zz-ddp.conf)" "the plugstack snippet"
for program in ddp-train ddp-why ddp-topo ddp-restart; do
  [ -x "/opt/slurm-ddp/bin/$program" ] || fail "/opt/slurm-ddp/bin/$program was not installed"
done
[ -f /opt/slurm-ddp/source/sbatch_templates/multi-node.sbatch ] || fail "the source tree is not in /opt/slurm-ddp/source"
assert_contains "$(srun --help 2>&1)" "--ddp-verbose" "srun lists --ddp after the install"
assert_eq 3 "$(run_on_cluster srun --ddp -N3 -n3 printenv WORLD_SIZE | sort -u)" "WORLD_SIZE on 3 nodes"
# The action found what it needed on the node itself: the plugin was built without cmake's help (it was there for
# ddp-train only), with make.
assert_contains "$(cat "$TEST_DIR/install.log")" "Slurm $running at /opt/slurm" "the Slurm found"

# A second run of the same install: nothing built, nothing written.
files() { find /opt/slurm/lib/slurm /opt/slurm/etc /opt/slurm-ddp -printf '%i %T@ %p\n' | sort; }
before=$(files)
start=$SECONDS
action "$SUM" --ddp-train-python /usr/bin/python3 "${ARGS[@]}" >"$TEST_DIR/rerun.log" 2>&1 ||
  fail "the rerun: $(cat "$TEST_DIR/rerun.log")"
rerun=$((SECONDS - start))
assert_contains "$(cat "$TEST_DIR/rerun.log")" "unchanged: this tarball is installed as given, and srun loads the plugin" "the rerun"
assert_eq "$before" "$(files)" "files after the rerun"
echo "FIGURE head-node action: fresh $fresh s (ddp.so, the tools and ddp-train built), rerun $rerun s"
pass "bad input refused with nothing installed; installed in $fresh s; rerun in $rerun s changed nothing"
