#!/usr/bin/env bash
# One entry point for people and CI:
#   ./run.sh            install what is missing, build, and run the demo job on the local two-node Slurm
#   ./run.sh test       install what is missing, build, and run every test (unit and real-cluster)
#   ./run.sh setup      install what is missing and build, nothing else
# Needs root for apt-get and for the test cluster (network namespaces, slurmd).
set -euo pipefail
cd "$(dirname "$0")"
ROOT=$PWD
BUILD=${DDP_BUILD_DIR:-$ROOT/build}

PACKAGES=(
  cmake ninja-build g++ clang libclang-rt-14-dev pkg-config
  libslurm-dev slurmctld slurmd slurm-client munge
  libhwloc-dev hwloc
  libopenmpi-dev openmpi-bin
  libtorch-dev libgloo-dev libopenblas0-pthread python3-torch
  libgtest-dev
  iproute2 procps psmisc util-linux shellcheck python3-yaml
)

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

build() {
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDDP_FUZZ=ON >/dev/null
  cmake --build "$BUILD" -j "$(nproc)"
}

run_tests() {
  # Cluster tests bring up their own Slurm through a CTest fixture and tear it down, also on failure.
  ctest --test-dir "$BUILD" --output-on-failure -j 1 "$@"
}

case "${1:-demo}" in
  setup) install_packages; build ;;
  test)  shift || true; install_packages; build; run_tests "$@" ;;
  demo)  install_packages; build; exec "$ROOT/tests/cluster/demo.sh" "$BUILD" ;;
  *) echo "usage: $0 [demo|test|setup]" >&2; exit 2 ;;
esac
