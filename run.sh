#!/usr/bin/env bash
# One entry point for people and CI:
#   ./run.sh                 install what is missing, build, and run the demo job on the local two-node Slurm
#   ./run.sh test [--stack S] [CTEST ARGS...]
#                            install what is missing, build, and run every test (unit and real-cluster) on every
#                            stack, or on stack S only; CTEST ARGS (e.g. -R cluster_) go to each stack's ctest
#   ./run.sh setup           install what is missing and build, nothing else
# Stacks: debian12 (Slurm 22.05, LibTorch 1.13, OpenMPI 4.1), debian13 (Slurm 24.11, LibTorch 2.6, OpenMPI 5) and
# debian14 (forky, Debian testing: Slurm 26.05, LibTorch 2.14, OpenMPI 6).
# The one this machine runs is tested here; the others in a Debian root file system that tests/stacks/root.sh makes
# with debootstrap (cached in /var/cache/slurm-ddp/roots) and enters with its own namespaces.
# Needs root for apt-get, the roots and the test cluster (network namespaces, slurmd).
set -euo pipefail
cd "$(dirname "$0")"
ROOT=$PWD

# The same names in bookworm and trixie (libclang-rt-dev is clang's default runtime there, 14 and 19).
PACKAGES=(
  cmake ninja-build g++ clang libclang-rt-dev pkg-config
  libslurm-dev slurmctld slurmd slurm-client munge
  libhwloc-dev hwloc
  libopenmpi-dev openmpi-bin
  libtorch-dev libgloo-dev libopenblas0-pthread python3-torch
  libgtest-dev nlohmann-json3-dev
  iproute2 procps psmisc util-linux e2fsprogs shellcheck python3-yaml clang-format
  file dpkg-dev bc
)
declare -A RELEASE_OF=([debian12]=bookworm [debian13]=trixie [debian14]=forky)
STACKS=(debian12 debian13 debian14)

install_packages() {
  local missing=()
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "run.sh: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# This machine's stack, from /etc/os-release; empty when it is none of them.
host_stack() {
  local codename s
  codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
  for s in "${STACKS[@]}"; do [ "${RELEASE_OF[$s]}" != "$codename" ] || echo "$s"; done
}

# This machine's stack builds in build/ (or DDP_BUILD_DIR); a stack in a root (tests/stacks/root.sh sets
# DDP_IN_ROOT) in build-STACK/, beside it in the same checkout.
build_dir() {  # STACK
  if [ "$1" = "$(host_stack)" ] && [ -z "${DDP_IN_ROOT:-}" ]; then echo "${DDP_BUILD_DIR:-$ROOT/build}"
  else echo "$ROOT/build-$1"; fi
}

# Each standard once, each with a LibTorch its users build against: Debian 12 (LibTorch 1.13) and Debian 13 (2.6) as
# C++17, Debian 14 (2.14, whose headers require it) as C++20.
build() {
  local stack dir standard=17
  stack=$(host_stack)
  dir=$(build_dir "$stack")
  [ "$stack" != debian14 ] || standard=20
  cmake -S "$ROOT" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDDP_FUZZ="$(on_the_host)" \
    -DDDP_TEST_SCALE="$(on_the_host)" -DDDP_TEST_GPU_CHECK="$([ "$stack" = debian14 ] && echo ON || echo OFF)" \
    -DCMAKE_CXX_STANDARD=$standard >/dev/null
  cmake --build "$dir" -j "$(nproc)"
}

# What does not depend on the stack runs once, on this machine's: the fuzz targets (the core's parsers, which use
# no library of the stack), the sanitizer leg and the 32-node scale test. ON here, OFF in a root.
on_the_host() { if [ -z "${DDP_IN_ROOT:-}" ]; then echo ON; else echo OFF; fi; }

run_tests() {
  # Cluster tests bring up their own Slurm through a CTest fixture and tear it down, also on failure.
  ctest --test-dir "$(build_dir "$(host_stack)")" --output-on-failure -j 1 "$@"
}

# ---- Sanitizer leg: the unit tests that need no LibTorch (core, topology, launch, doctor with
# its CLI tests) built again with AddressSanitizer and UndefinedBehaviorSanitizer in BUILD-sanitize; any finding
# stops the program and fails its test. LibTorch's code is not instrumented, so the runtime's tests stay out.
sanitizer_leg() {
  local dir
  dir=$(build_dir "$(host_stack)")-sanitize
  cmake -S "$ROOT" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DDDP_SANITIZE=ON -DDDP_BUILD_RUNTIME=OFF \
    -DDDP_BUILD_PLUGIN=OFF >/dev/null &&
    cmake --build "$dir" -j "$(nproc)" --target core_tests topology_tests launch_tests doctor_tests ddp-doctor \
      ddp-topo ddp-test-port fake_nvml &&
    ctest --test-dir "$dir" --output-on-failure -j 1 -R '^(core|topology|launch|doctor)\.'
}
# ---- end of the sanitizer leg

# Tests of one stack: here, or inside its root (packages installed with the host's network, tests in a network
# namespace of their own, so that they meet neither the network nor a test cluster of this machine).
test_stack() {
  local stack=$1 release
  shift
  if [ "$stack" = "$(host_stack)" ]; then
    install_packages
    build
    local status=0
    run_tests "$@" || status=$?
    # With the whole suite only, not a chosen part of it, and on this machine's stack only.
    [ $# -gt 0 ] || [ "$(on_the_host)" = OFF ] || sanitizer_leg || status=$?
    return "$status"
  fi
  release=${RELEASE_OF[$stack]}
  "$ROOT/tests/stacks/root.sh" create "$release" >/dev/null
  "$ROOT/tests/stacks/root.sh" run "$release" -- ./run.sh __install
  "$ROOT/tests/stacks/root.sh" run "$release" --isolated -- ./run.sh test --stack "$stack" "$@"
}

cmd_test() {
  local chosen=("${STACKS[@]}") failed=() s t0
  if [ "${1:-}" = --stack ]; then
    [ -n "${RELEASE_OF[${2:-}]+x}" ] || { echo "run.sh: --stack '${2:-}': give one of ${STACKS[*]}" >&2; exit 2; }
    chosen=("$2")
    shift 2
  fi
  [ -n "$(host_stack)" ] || { echo "run.sh: this machine runs none of Debian 12, 13 and 14; the stacks need one of them" >&2; exit 2; }
  for s in "${chosen[@]}"; do
    t0=$SECONDS
    echo "run.sh: ===== stack $s (Debian ${RELEASE_OF[$s]}) ====="
    if test_stack "$s" "$@"; then
      echo "run.sh: stack $s passed in $((SECONDS - t0)) s"
    else
      echo "run.sh: stack $s FAILED after $((SECONDS - t0)) s"
      failed+=("$s")
    fi
  done
  [ ${#failed[@]} -eq 0 ] || { echo "run.sh: failed on: ${failed[*]}" >&2; exit 1; }
  # Every stack passed its suite: their snapshots must also resume on each other (the whole suite only).
  if [ ${#chosen[@]} -eq ${#STACKS[@]} ] && [ $# -eq 0 ]; then
    local roots=()
    for s in "${STACKS[@]}"; do [ "$s" = "$(host_stack)" ] || roots+=("$(build_dir "$s"):${RELEASE_OF[$s]}"); done
    "$ROOT/tests/stacks/cross_stack.sh" "$(build_dir "$(host_stack)")" "${roots[@]}" ||
      { echo "run.sh: snapshots do not move among the stacks" >&2; exit 1; }
  fi
}

case "${1:-demo}" in
  setup) install_packages; build ;;
  test) shift; cmd_test "$@" ;;
  demo) install_packages; build; exec "$ROOT/tests/cluster/demo.sh" "$(build_dir "$(host_stack)")" ;;
  __install) install_packages ;;  # inside a root, with the host's network (test_stack)
  *) echo "usage: $0 [demo|test [--stack ${STACKS[*]// /|}] [CTEST ARGS]|setup]" >&2; exit 2 ;;
esac
