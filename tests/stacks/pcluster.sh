#!/usr/bin/env bash
# The ParallelCluster stack: a Debian 12 root (tests/stacks/root.sh, named pcluster) made to look like an AWS
# ParallelCluster head node, with Slurm 25.11.6 built from third_party/slurm's source into /opt/slurm the way
# ParallelCluster's cookbook builds it, and the leg that installs and runs slurm-ddp there as an admin would.
#
#   pcluster.sh prepare         the root and its packages (needs the network; from the host)
#   pcluster.sh build-slurm     Slurm into the root's /opt/slurm, once per machine: skipped while the cached build is
#                               of the same source and configure line (no network; from the host)
#   pcluster.sh test TARBALL [FEATURE.sh ...]
#                               the leg (tests/pcluster/leg.sh), inside the root seen through an overlay (whatever
#                               the leg installs is gone after it) and without network, from TARBALL: a tarball of
#                               this source tree, as an admin uploads it to S3
#   pcluster.sh tarball FILE    write that tarball of this checkout's files (git ls-files) to FILE
#
# What the root has, and why (docs/admin.md, "ParallelCluster"):
# - AMI_PACKAGES: what the cookbook's base_packages (install_packages_ubuntu22+.rb) and its Slurm build leave on a
#   head node for building a plugin: the C and C++ compilers, make, the hwloc headers, python3 and curl. No cmake,
#   no JSON library, no pkg-config of our asking.
# - STANDIN_PACKAGES: Debian 12's packages for what the cookbook builds itself: PMIx (5 there, libpmix-dev 4.2 here,
#   at /opt/pmix), libjwt (1.18 there, 1.10 here, at /opt/libjwt) and munge; and the other libraries of the
#   configure line (Slurm's build dependencies).
# - TEST_PACKAGES: what the test cluster runs on (namespaces, processes) and the admin's PyTorch: Debian's
#   python3-torch with its LibTorch headers stands in for a pip or conda PyTorch (whose wheel has Gloo's headers
#   inside; Debian's are libgloo-dev's).
# - DOWNLOADED_PACKAGES: fetched into apt's cache, not installed: the leg installs cmake offline after the action
#   named it as missing for ddp-train (the fix an admin runs, then the rerun).
set -Eeuo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
readonly ROOT
readonly NAME=pcluster
readonly SLURM_TARBALL=${DDP_SLURM_SOURCE:-$ROOT/third_party/slurm/slurm-25.11.6.tar.bz2}
readonly SLURM_SHA256=02f778ede152ed94a785d5900f84ea0ded8318f27e4290caf490509f430b359b  # third_party/slurm/README.md
# The cookbook's configure line (install_slurm.rb), and its install targets.
readonly CONFIGURE=(--prefix=/opt/slurm --with-pmix=/opt/pmix --with-jwt=/opt/libjwt --enable-slurmrestd)
readonly AMI_PACKAGES=(gcc g++ make libc6-dev binutils libhwloc-dev python3 curl jq bzip2 xz-utils iproute2
  libcurl4-openssl-dev libpam0g-dev libdbus-1-dev libevent-dev automake autoconf libtool)
readonly STANDIN_PACKAGES=(libpmix-dev libjwt-dev libmunge-dev munge libjson-c-dev libhttp-parser-dev libyaml-dev
  libmariadb-dev-compat liblua5.3-dev perl)
readonly TEST_PACKAGES=(util-linux procps psmisc python3-torch libtorch-dev libgloo-dev libopenblas0-pthread)
readonly DOWNLOADED_PACKAGES=(cmake)

say() { echo "pcluster.sh: $*" >&2; }
die() { say "error: $*"; exit 1; }

in_root() { "$ROOT/tests/stacks/root.sh" run "$NAME" "$@"; }

cmd_prepare() {
  "$ROOT/tests/stacks/root.sh" create "$NAME" >/dev/null
  in_root -- "$ROOT/tests/stacks/pcluster.sh" __install
}

# Inside the root, with the network.
install_packages() {
  local wanted=("${AMI_PACKAGES[@]}" "${STANDIN_PACKAGES[@]}" "${TEST_PACKAGES[@]}") missing=() p
  for p in "${wanted[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  export DEBIAN_FRONTEND=noninteractive
  if [ ${#missing[@]} -gt 0 ]; then
    say "installing ${missing[*]}"
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
  if ! ls /var/cache/apt/archives/cmake_*.deb >/dev/null 2>&1; then
    [ ${#missing[@]} -gt 0 ] || apt-get update -qq
    apt-get install -y -qq --no-install-recommends --download-only "${DOWNLOADED_PACKAGES[@]}" >/dev/null
  fi
  # Where the cookbook's PMIx and libjwt are: Debian's in their place.
  mkdir -p /opt/libjwt
  ln -sfn /usr/lib/x86_64-linux-gnu/pmix2 /opt/pmix
  ln -sfn /usr/include /opt/libjwt/include
  ln -sfn /usr/lib/x86_64-linux-gnu /opt/libjwt/lib
}

# The cached build is keyed by the source's SHA-256 and the configure line.
build_key() { echo "$(sha256sum <"$SLURM_TARBALL" | cut -d' ' -f1) ${CONFIGURE[*]}"; }

cmd_build_slurm() {
  [ -r "$SLURM_TARBALL" ] || die "no Slurm source at $SLURM_TARBALL; set DDP_SLURM_SOURCE"
  [ -n "${DDP_SLURM_SOURCE:-}" ] || [ "$(sha256sum <"$SLURM_TARBALL" | cut -d' ' -f1)" = "$SLURM_SHA256" ] ||
    die "$SLURM_TARBALL does not have the SHA-256 of third_party/slurm/README.md; restore it from git"
  local dir
  dir=$("$ROOT/tests/stacks/root.sh" path "$NAME")
  if [ "$(cat "$dir/opt/slurm/.ddp-build" 2>/dev/null)" = "$(build_key)" ]; then
    say "Slurm in $dir/opt/slurm is built from this source with this configure line: kept"
    return 0
  fi
  local copy=$dir/var/tmp/slurm-source.tar.bz2
  cp "$SLURM_TARBALL" "$copy"
  in_root --isolated -- "$ROOT/tests/stacks/pcluster.sh" __build_slurm /var/tmp/slurm-source.tar.bz2
  rm -f "$copy"
  build_key >"$dir/opt/slurm/.ddp-build"
}

# Inside the root: configure, make, make install install-contrib, as the cookbook does.
build_slurm() {
  local tarball=$1 t0=$SECONDS src
  rm -rf /opt/slurm /var/tmp/slurm-build
  mkdir -p /var/tmp/slurm-build
  tar -xjf "$tarball" -C /var/tmp/slurm-build
  src=$(find /var/tmp/slurm-build -mindepth 1 -maxdepth 1 -type d | head -n 1)
  cd "$src"
  say "configure ${CONFIGURE[*]}"
  ./configure "${CONFIGURE[@]}" >/var/tmp/slurm-configure.log 2>&1 ||
    { tail -n 20 /var/tmp/slurm-configure.log; die "Slurm's configure failed"; }
  say "make -j$(nproc) (configured in $((SECONDS - t0)) s)"
  make -j"$(nproc)" >/var/tmp/slurm-make.log 2>&1 || { tail -n 30 /var/tmp/slurm-make.log; die "Slurm's make failed"; }
  make install install-contrib >/var/tmp/slurm-install.log 2>&1 ||
    { tail -n 30 /var/tmp/slurm-install.log; die "Slurm's make install install-contrib failed"; }
  echo /opt/slurm/lib/ >/etc/ld.so.conf.d/slurm.conf
  ldconfig
  mkdir -p /opt/slurm/etc
  cd /
  rm -rf /var/tmp/slurm-build
  say "Slurm $(/opt/slurm/sbin/slurmd -V 2>/dev/null | awk '{print $2}') built into /opt/slurm in $((SECONDS - t0)) s"
}

cmd_tarball() {
  local out=${1:?tarball FILE}
  (cd "$ROOT" && git ls-files -z --cached --others --exclude-standard | grep -zv '^build' |
    tar --null -T - --transform 's,^,slurm-ddp/,' -czf "$out")
}

cmd_test() {
  local tarball=${1:?test TARBALL [FEATURE.sh ...]}
  [ -f "$tarball" ] || die "no tarball $tarball: make one with pcluster.sh tarball FILE"
  in_root --isolated --overlay -- "$ROOT/tests/pcluster/leg.sh" "$@"
}

case ${1:-} in
  prepare) cmd_prepare ;;
  build-slurm) cmd_build_slurm ;;
  test) shift; cmd_test "$@" ;;
  tarball) shift; cmd_tarball "$@" ;;
  __install) install_packages ;;
  __build_slurm) shift; build_slurm "$@" ;;
  *) die "usage: pcluster.sh prepare|build-slurm|test TARBALL|tarball FILE (see the header of $0)" ;;
esac
