#!/usr/bin/env bash
# A Slurm, LibTorch or OpenMPI the project cannot support fails at configure time, with one line that names the
# version found and the versions supported. Each case configures the source tree against a stand-in for one
# dependency (Slurm's version header, a TorchConfig of another version, an mpi.h of another MPI) in a fresh
# build directory; the real ones on this machine serve everything else.
#   configure_versions_test.sh
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# refused WHAT EXPECTED CMAKE_ARGS...: configuring must fail with an error that holds EXPECTED (one message, which
# CMake wraps at 80 columns: the comparison is on the output with its line breaks as spaces).
refused() {
  local what=$1 expected=$2 dir output
  shift 2
  dir=$(mktemp -d "$WORK/build.XXXX")
  if output=$(cmake -S "$SRC" -B "$dir" "$@" 2>&1); then fail "$what: configuring succeeded"; fi
  grep -qF -- "$expected" <<<"$(tr -s ' \n' ' ' <<<"$output")" ||
    fail "$what: the error does not say [$expected]: $output"
  echo "ok: $what"
}

slurm_headers() {  # DIR HEX: slurm/spank.h and a slurm_version.h of that version
  mkdir -p "$1/slurm"
  : >"$1/slurm/spank.h"
  echo "#define SLURM_VERSION_NUMBER $2" >"$1/slurm/slurm_version.h"
}
slurm_headers "$WORK/slurm2108" 0x150800
slurm_headers "$WORK/slurm2611" 0x1a0b00
refused "Slurm 21.08" "Slurm 21.08 found ($WORK/slurm2108/slurm/slurm_version.h); slurm-ddp supports Slurm 22.05 to 26.05" \
  -DSLURM_INCLUDE_DIR="$WORK/slurm2108" -DDDP_BUILD_RUNTIME=OFF
refused "Slurm 26.11" "Slurm 26.11 found ($WORK/slurm2611/slurm/slurm_version.h); slurm-ddp supports Slurm 22.05 to 26.05: build against one of those headers (SLURM_INCLUDE_DIR), or -DDDP_ALLOW_UNTESTED_SLURM=ON to try a newer Slurm" \
  -DSLURM_INCLUDE_DIR="$WORK/slurm2611" -DDDP_BUILD_RUNTIME=OFF

torch_config() {  # DIR VERSION: a TorchConfig that find_package(Torch) accepts, of that version
  mkdir -p "$1"
  echo "set(TORCH_INSTALL_PREFIX $1)" >"$1/TorchConfig.cmake"
  printf 'set(PACKAGE_VERSION %s)\nset(PACKAGE_VERSION_COMPATIBLE TRUE)\n' "$2" >"$1/TorchConfigVersion.cmake"
}
torch_config "$WORK/torch1.12" 1.12.1
torch_config "$WORK/torch3" 3.0.0
refused "LibTorch 1.12" "LibTorch 1.12.1 found at $WORK/torch1.12; slurm-ddp supports LibTorch 1.13 and 2.x" \
  -DTorch_DIR="$WORK/torch1.12" -DDDP_BUILD_PLUGIN=OFF
refused "LibTorch 3.0" "LibTorch 3.0.0 found at $WORK/torch3; slurm-ddp supports LibTorch 1.13 and 2.x" \
  -DTorch_DIR="$WORK/torch3" -DDDP_BUILD_PLUGIN=OFF

# The MPI check reads the mpi.h that FindMPI's include directories hold; the cache entry stands in for it. It comes
# after LibTorch's, so these configure against this machine's LibTorch and MPI (run.sh installs both), as C++20,
# which every LibTorch takes and 2.12 and later require.
echo '#define OMPI_MAJOR_VERSION 3' >"$WORK/mpi3.h"
echo '#define OMPI_MAJOR_VERSION 7' >"$WORK/mpi7.h"
echo '#define MPICH_VERSION "4.1"' >"$WORK/mpich.h"
refused "OpenMPI 3" "OpenMPI 3 found ($WORK/mpi3.h); slurm-ddp's MPI group supports OpenMPI 4 to 6" \
  -DDDP_MPI_H="$WORK/mpi3.h" -DDDP_BUILD_PLUGIN=OFF -DCMAKE_CXX_STANDARD=20
refused "OpenMPI 7" "OpenMPI 7 found ($WORK/mpi7.h); slurm-ddp's MPI group supports OpenMPI 4 to 6" \
  -DDDP_MPI_H="$WORK/mpi7.h" -DDDP_BUILD_PLUGIN=OFF -DCMAKE_CXX_STANDARD=20
refused "MPICH" "the MPI found ($WORK/mpich.h) is not OpenMPI; slurm-ddp's MPI group supports OpenMPI 4 to 6" \
  -DDDP_MPI_H="$WORK/mpich.h" -DDDP_BUILD_PLUGIN=OFF -DCMAKE_CXX_STANDARD=20
echo "PASS: unsupported Slurm, LibTorch and MPI versions are refused at configure time, each in one line"
