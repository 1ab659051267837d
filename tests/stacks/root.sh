#!/usr/bin/env bash
# A second Debian release to build and test on: a root file system made with debootstrap from the Debian mirror
# this machine's apt sources name, cached between runs, entered as the root of private mount, PID and UTS
# namespaces (pivot_root, not chroot: with chroot, `nsenter --mount` puts a process back at the host's root and
# the test cluster's slurmd cannot see the root's files). Needs root.
#
#   root.sh path RELEASE                  print the cached root's directory (it may not exist yet)
#   root.sh create RELEASE                debootstrap it when missing or unfinished; print its directory
#   root.sh run RELEASE [--isolated] [--overlay] [--] CMD...
#                                         CMD inside the root, as root, in this repository (bind-mounted at
#                                         the same path), with a clean environment. --isolated: also in a
#                                         new network namespace (loopback only): tests there cannot meet a test
#                                         cluster of the host or of another root, and nothing reaches the network.
#                                         --overlay: the root is seen through an overlay whose writes live in a
#                                         tmpfs of this entry: whatever CMD installs or changes is gone after it,
#                                         and the next entry starts from the cached root as it was.
#   root.sh remove RELEASE                delete the cached root
#
# RELEASE is a Debian codename (trixie, bookworm), or the name of a root made from one: pcluster, a Debian 12 root
# made to look like an AWS ParallelCluster head node (tests/stacks/pcluster.sh). The cache is $DDP_ROOTS_DIR
# (default /var/cache/slurm-ddp/roots).
# Every process started inside ends with CMD (the PID namespace dies with its first process), and every mount
# lives in the private mount namespace: nothing is left behind on the host, also on failure.
set -Eeuo pipefail

readonly ROOTS=${DDP_ROOTS_DIR:-/var/cache/slurm-ddp/roots}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
readonly REPO
readonly SAFE_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

say() { echo "root.sh: $*" >&2; }
die() { say "error: $*"; exit 1; }

need_root() { [ "$(id -u)" -eq 0 ] || die "needs root (debootstrap, mount and PID namespaces); run with sudo"; }

check_release() {
  [[ ${1:-} =~ ^[a-z]+$ ]] || die "release '${1:-}': give a Debian codename, e.g. trixie"
}

root_dir() { echo "$ROOTS/$1"; }

# The Debian release a root is made from: its own name, but for the roots named after what they stand in for.
codename_of() {
  case $1 in
    pcluster) echo bookworm ;;
    *) echo "$1" ;;
  esac
}

# The Debian mirror of this machine's apt sources: the first http(s) URI of a source whose suites are plain
# Debian ones (not -security), in deb822 (.sources) or one-line (.list) form.
debian_mirror() {
  local uri
  uri=$(awk '
      /^URIs:/   { uris = $0; sub(/^URIs:[ \t]*/, "", uris) }
      /^Suites:/ { if ($0 !~ /-security/ && uris != "") { split(uris, u, /[ \t]+/); print u[1]; exit } }
      /^$/       { uris = "" }' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
  if [ -z "$uri" ]; then
    uri=$(grep -hE '^deb[[:space:]]+(\[[^]]*\][[:space:]]+)?https?://' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
      grep -v -- '-security' | sed -E 's/^deb[[:space:]]+(\[[^]]*\][[:space:]]+)?//' | awk '{print $1; exit}' || true)
  fi
  [ -n "$uri" ] || die "no Debian mirror in /etc/apt/sources.list or /etc/apt/sources.list.d/*.sources; add one"
  echo "$uri"
}

need_debootstrap() {
  command -v debootstrap >/dev/null && return 0
  say "installing debootstrap"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null ||
    die "cannot install debootstrap (apt-get install debootstrap)"
}

# The root is complete once .ddp-root-ready exists: an interrupted debootstrap is started again from scratch.
cmd_create() {
  local release=$1 dir mirror t0=$SECONDS codename
  dir=$(root_dir "$release")
  codename=$(codename_of "$release")
  mkdir -p "$ROOTS"
  exec 8>"$ROOTS/$release.lock"
  flock -w 1200 8 || die "another root.sh holds $ROOTS/$release.lock for over 20 minutes"
  if [ ! -e "$dir/.ddp-root-ready" ]; then
    need_debootstrap
    mirror=$(debian_mirror)
    rm -rf "$dir"
    say "creating a $release root ($codename) in $dir from $mirror (about a minute)"
    # A release newer than this machine's debootstrap (forky on bookworm) is made with the script of sid, which
    # every debootstrap has and which names no release of its own.
    local script=/usr/share/debootstrap/scripts/$codename
    [ -e "$script" ] || script=/usr/share/debootstrap/scripts/sid
    debootstrap --variant=minbase "$codename" "$dir" "$mirror" "$script" >"$ROOTS/$release.debootstrap.log" 2>&1 ||
      die "debootstrap $release failed: $(tail -n 3 "$ROOTS/$release.debootstrap.log" | tr '\n' ' ')"
    # Daemons' postinst scripts must not start them inside the root (they would run on the host's network).
    printf '#!/bin/sh\nexit 101\n' >"$dir/usr/sbin/policy-rc.d"
    chmod 0755 "$dir/usr/sbin/policy-rc.d"
    # Debian testing's Release file can be past its Valid-Until date on a mirror snapshot; its signature still holds.
    printf 'Acquire::Check-Valid-Until "false";\n' >"$dir/etc/apt/apt.conf.d/99ddp-valid-until"
    printf '127.0.0.1\tlocalhost\n127.0.1.1\tddp-%s\n' "$release" >"$dir/etc/hosts"
    touch "$dir/.ddp-root-ready"
    say "$release root ready in $((SECONDS - t0)) s"
  fi
  echo "$dir"
}

# Runs as PID 1 of the new PID namespace, inside the new mount namespace, before pivot_root.
enter_inner() {
  local dir=$1 isolated=$2 release=$3 overlay=$4
  shift 4
  if [ "$overlay" = 1 ]; then dir=$(mount_overlay "$dir" "$release"); fi
  mount --bind "$dir" "$dir"
  mount -t proc proc "$dir/proc"
  mount --rbind /sys "$dir/sys"
  mount --make-rslave "$dir/sys"
  mount --rbind /dev "$dir/dev"
  mount --make-rslave "$dir/dev"
  # Each entry has its own /dev/shm: OpenMPI names its shared-memory segments by host, user and job (in every
  # stack's test cluster: node1, the job user, the same Slurm job ids), and a killed program's segments go with the
  # entry rather than staying on the host.
  mount -t tmpfs -o mode=1777,nosuid,nodev ddp-root-shm "$dir/dev/shm"
  mount -t tmpfs -o mode=0755 ddp-root-run "$dir/run"
  mount -t tmpfs -o mode=1777 ddp-root-tmp "$dir/tmp"
  # Each entry has its own /etc/hosts (the test cluster adds its node names there): entries running at once
  # must not see, or remove, each other's lines.
  cp "$dir/etc/hosts" "$dir/run/hosts"
  mount --bind "$dir/run/hosts" "$dir/etc/hosts"
  mkdir -p "$dir$REPO" "$dir/.oldroot"
  mount --bind "$REPO" "$dir$REPO"
  [ "$isolated" = 1 ] || cp /etc/resolv.conf "$dir/etc/resolv.conf" 2>/dev/null || true
  cd "$dir"
  pivot_root . .oldroot
  umount -l /.oldroot
  rmdir /.oldroot 2>/dev/null || true
  hostname "ddp-$release"
  [ "$isolated" = 0 ] || ip link set lo up 2>/dev/null || true
  cd "$REPO"
  # This shell stays PID 1 of the namespace and reaps what is orphaned there (a test cluster's killed daemons
  # and slurmstepds): a zombie nobody reaps would look alive to the test cluster's teardown.
  env -i PATH="$SAFE_PATH" HOME=/root USER=root LOGNAME=root LANG=C.UTF-8 TERM="${TERM:-dumb}" \
    DDP_IN_ROOT="$release" "$@" &
  local child=$! rc=0
  trap 'kill -TERM "$child" 2>/dev/null' TERM INT HUP
  while :; do
    wait "$child" && rc=0 || rc=$?
    [ -e "/proc/$child" ] || break  # else a trapped signal interrupted the wait
  done
  exit "$rc"
}

# The cached root DIR seen through an overlay whose upper layer is a tmpfs of this (private) mount namespace: it goes
# with the entry. The mount point, $ROOTS/RELEASE.overlay, is an empty directory on the host; entries at once each
# mount their own tmpfs there. Prints the merged directory.
mount_overlay() {  # DIR RELEASE
  local top=$ROOTS/$2.overlay
  mkdir -p "$top"
  mount -t tmpfs -o mode=0755 ddp-root-overlay "$top"
  mkdir "$top/upper" "$top/work" "$top/merged"
  mount -t overlay ddp-root-overlay -o "lowerdir=$1,upperdir=$top/upper,workdir=$top/work" "$top/merged"
  echo "$top/merged"
}

cmd_run() {
  local release=$1 isolated=0 overlay=0 dir
  shift
  while [ $# -gt 0 ]; do
    case $1 in
      --isolated) isolated=1; shift ;;
      --overlay) overlay=1; shift ;;
      --) shift; break ;;
      *) break ;;
    esac
  done
  [ $# -gt 0 ] || die "run: no command; usage: root.sh run RELEASE [--isolated] [--overlay] [--] CMD..."
  dir=$(root_dir "$release")
  [ -e "$dir/.ddp-root-ready" ] || die "no $release root in $dir; run: root.sh create $release"
  local net=()
  [ "$isolated" = 0 ] || net=(--net)
  # --kill-child: when this script is killed, so is everything inside.
  exec unshare --mount --propagation private --pid --fork --kill-child --uts "${net[@]}" -- \
    "$0" __inner "$dir" "$isolated" "$release" "$overlay" "$@"
}

cmd_remove() {
  local dir
  dir=$(root_dir "$1")
  exec 8>"$ROOTS/$1.lock"
  flock -w 60 8 || die "$1 root is in use (root.sh holds $ROOTS/$1.lock)"
  rm -rf "$dir" "$ROOTS/$1.debootstrap.log"
  rmdir "$ROOTS/$1.overlay" 2>/dev/null || true
}

main() {
  local cmd=${1:-}
  shift || true
  case $cmd in
    path) check_release "${1:-}"; root_dir "$1" ;;
    create) need_root; check_release "${1:-}"; cmd_create "$1" ;;
    run) need_root; check_release "${1:-}"; cmd_run "$@" ;;
    remove) need_root; check_release "${1:-}"; cmd_remove "$1" ;;
    __inner) enter_inner "$@" ;;
    *) die "usage: root.sh path|create|run|remove RELEASE ... (see the header of $0)" ;;
  esac
}

main "$@"
