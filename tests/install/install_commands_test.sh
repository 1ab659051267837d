#!/usr/bin/env bash
# What the install scripts tell an admin to run on each system ParallelCluster and PCS use, from that system's
# /etc/os-release (the ID, ID_LIKE and VERSION_ID lines each ships): the branches of install_lib.sh that only the
# Debian roots run for real. Then the head-node script end to end on this machine, told it is RHEL 9 and that its C++
# compiler is missing: one line with dnf's command, nothing built.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
SCRIPTS=$HERE/../../sbatch_templates/parallelcluster
WORK=$(mktemp -d /tmp/ddp-install-commands.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
export PROGRAM=test  # install_lib.sh's messages name it
# shellcheck source=../../sbatch_templates/parallelcluster/install_lib.sh
source "$SCRIPTS/install_lib.sh"

# system|os-release lines|cmake|hwloc headers|C++ compiler|zlib|hwloc library
while IFS='|' read -r system lines cmake hwloc cxx zlib runtime; do
  printf '%b\n' "$lines" >"$WORK/os-release"
  got="$(DDP_OS_RELEASE=$WORK/os-release install_command cmake)|$(DDP_OS_RELEASE=$WORK/os-release install_command hwloc)|$(DDP_OS_RELEASE=$WORK/os-release install_command cxx)|$(DDP_OS_RELEASE=$WORK/os-release install_command zlib)|$(DDP_OS_RELEASE=$WORK/os-release install_command hwloc-runtime)"
  [ "$got" = "$cmake|$hwloc|$cxx|$zlib|$runtime" ] || fail "$system: got $got"
  echo "$system: $got"
done <<'TABLE'
Ubuntu 22.04|NAME="Ubuntu"\nID=ubuntu\nID_LIKE=debian\nVERSION_ID="22.04"|apt-get install -y cmake|apt-get install -y libhwloc-dev|apt-get install -y g++|apt-get install -y zlib1g-dev|apt-get install -y libhwloc15
Ubuntu 24.04|NAME="Ubuntu"\nID=ubuntu\nID_LIKE=debian\nVERSION_ID="24.04"|apt-get install -y cmake|apt-get install -y libhwloc-dev|apt-get install -y g++|apt-get install -y zlib1g-dev|apt-get install -y libhwloc15
Amazon Linux 2023|NAME="Amazon Linux"\nID="amzn"\nID_LIKE="fedora"\nVERSION_ID="2023"|dnf install -y cmake|dnf install -y hwloc-devel|dnf install -y gcc-c++|dnf install -y zlib-devel|dnf install -y hwloc-libs
Amazon Linux 2|NAME="Amazon Linux"\nID="amzn"\nID_LIKE="centos rhel fedora"\nVERSION_ID="2"|yum install -y cmake3|yum install -y hwloc-devel|yum install -y gcc-c++|yum install -y zlib-devel|yum install -y hwloc-libs
RHEL 8|NAME="Red Hat Enterprise Linux"\nID="rhel"\nID_LIKE="fedora"\nVERSION_ID="8.10"|dnf install -y cmake|dnf install -y hwloc-devel|dnf install -y gcc-c++|dnf install -y zlib-devel|dnf install -y hwloc-libs
RHEL 9|NAME="Red Hat Enterprise Linux"\nID="rhel"\nID_LIKE="fedora"\nVERSION_ID="9.4"|dnf install -y cmake|dnf install -y hwloc-devel|dnf install -y gcc-c++|dnf install -y zlib-devel|dnf install -y hwloc-libs
Rocky Linux 9|NAME="Rocky Linux"\nID="rocky"\nID_LIKE="rhel centos fedora"\nVERSION_ID="9.4"|dnf install -y cmake|dnf install -y hwloc-devel|dnf install -y gcc-c++|dnf install -y zlib-devel|dnf install -y hwloc-libs
TABLE

# The head-node script on this machine, told it is RHEL 9 without a C++ compiler.
printf 'ID="rhel"\nID_LIKE="fedora"\nVERSION_ID="9.4"\n' >"$WORK/rhel9"
printf 'ClusterName=t\nSlurmctldHost=localhost\nSlurmctldPort=1\nPlugStackConfig=%s/plugstack.conf\nNodeName=n1 CPUs=1\nPartitionName=p Nodes=n1\n' "$WORK" >"$WORK/slurm.conf"
mkdir -p "$WORK/plugins"
if out=$(DDP_OS_RELEASE=$WORK/rhel9 CXX=no-such-g++ "$SCRIPTS/install-head-node.sh" --check --slurm-prefix /usr \
  --slurm-conf "$WORK/slurm.conf" --plugin-dir "$WORK/plugins" 2>&1); then
  fail "a machine without its C++ compiler passed the check: $out"
fi
grep -qx "install-head-node: missing: a C++17 compiler: dnf install -y gcc-c++" <<<"$out" || fail "the compiler's line: $out"
grep -q "nothing was built or installed; install what is named above and run again" <<<"$out" || fail "the verdict: $out"
[ -z "$(ls -A "$WORK/plugins")" ] || fail "something was installed: $(ls -A "$WORK/plugins")"
echo "install_commands_test: OK"
