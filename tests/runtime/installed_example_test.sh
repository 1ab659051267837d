#!/usr/bin/env bash
# The C++ API as a user gets it: `cmake --install` of the dev component into a scratch prefix, then
# runtime/examples/spirals, a project of its own (its own torch::nn::Module and Dataset), configured with
# find_package(SlurmDDP) against that prefix only, built, and run on 2 ranks with the torchrun variables: the
# seed's lines, snapshots, a final model, and a resume. The installed headers are include/slurm-ddp, six at most,
# and each compiles alone against the package (so the headers it installs are all that the API needs); ddp-train's
# main compiles against the package too. The slurm-ddp-dev .deb holds the same files.
#   installed_example_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
BUILD=${1:?usage: installed_example_test.sh BUILD_DIR SOURCE_DIR}
SOURCE=${2:?usage: installed_example_test.sh BUILD_DIR SOURCE_DIR}
WORK=$(mktemp -d /tmp/ddp-installed-example.XXXXXX)
PIDS=()
cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

PREFIX=$WORK/prefix/usr
cmake --install "$BUILD" --prefix "$PREFIX" --component dev >"$WORK/install.log" || fail "cmake --install: $(tail -5 "$WORK/install.log")"
for file in include/slurm-ddp/ddp_runtime/train.hpp include/slurm-ddp/core/error.hpp lib/cmake/SlurmDDP/SlurmDDPConfig.cmake; do
  [ -f "$PREFIX/$file" ] || fail "the install has no $file"
done

# One imported target: the core's code is compiled into the runtime, nothing else is exported.
exported=$(grep -ho 'add_library(SlurmDDP::[A-Za-z_]*' "$PREFIX"/lib/cmake/SlurmDDP/SlurmDDPTargets*.cmake | sort -u | tr '\n' ' ')
[ "$exported" = "add_library(SlurmDDP::ddp_runtime " ] || fail "the package exports $exported; only SlurmDDP::ddp_runtime"

# Each installed header alone, in a translation unit of its own, against the installed package only.
mkdir -p "$WORK/headers"
headers=$(cd "$PREFIX/include/slurm-ddp" && find . -type f | sed 's|^\./||' | sort)
# Exactly the source tree's public include directory, and few: the entry point, the job, the options, and the two
# core headers they include. A seventh is a header made public by accident (one that names the runtime's internals).
public=$(cd "$SOURCE/include/slurm-ddp" && find . -type f | sed 's|^\./||' | sort)
[ "$headers" = "$public" ] ||
  fail "installed headers differ from include/slurm-ddp: $(diff <(echo "$public") <(echo "$headers") | grep '^[<>]' | tr '\n' ' ')"
[ "$(echo "$headers" | wc -l)" -le 6 ] || fail "$(echo "$headers" | wc -l) headers are installed, more than the API's six: $headers"
for needed in core/error.hpp ddp_runtime/job.hpp ddp_runtime/train.hpp ddp_runtime/train_options.hpp; do
  echo "$headers" | grep -qx "$needed" || fail "the install has no $needed"
done
# Each the source tree's own, as it is, opening with its contract after #pragma once.
for header in $headers; do
  cmp -s "$SOURCE/include/slurm-ddp/$header" "$PREFIX/include/slurm-ddp/$header" ||
    fail "include/slurm-ddp/$header was installed changed, or is not in include/slurm-ddp"
done
for header in $headers; do
  sed -n 2p "$PREFIX/include/slurm-ddp/$header" | grep -q '^// [A-Za-z]' ||
    fail "include/slurm-ddp/$header does not open with a comment saying what it is"
done
{
  echo 'cmake_minimum_required(VERSION 3.16)'
  echo 'project(each_header CXX)'
  echo 'find_package(SlurmDDP REQUIRED)'
  echo 'add_library(each_header OBJECT)'
  echo 'target_link_libraries(each_header PRIVATE SlurmDDP::ddp_runtime)'
} >"$WORK/headers/CMakeLists.txt"
for header in $headers; do
  unit=$WORK/headers/$(echo "$header" | tr '/.' '__').cpp
  echo "#include <$header>" >"$unit"
  echo "target_sources(each_header PRIVATE $unit)" >>"$WORK/headers/CMakeLists.txt"
done
# ddp-train itself is a program of the API: its main compiles and links against the installed package alone.
echo "add_executable(ddp_train_main $SOURCE/runtime/ddp-train/main.cpp)" >>"$WORK/headers/CMakeLists.txt"
echo 'target_link_libraries(ddp_train_main PRIVATE SlurmDDP::ddp_runtime)' >>"$WORK/headers/CMakeLists.txt"
cmake -S "$WORK/headers" -B "$WORK/headers/build" -G Ninja -DCMAKE_PREFIX_PATH="$PREFIX" >"$WORK/headers.log" 2>&1 ||
  fail "configure of the header check: $(tail -20 "$WORK/headers.log")"
if grep -q -e "$SOURCE/src" -e "$SOURCE/include" -e "$SOURCE/runtime/ddp_runtime" "$WORK/headers/build/build.ninja"; then
  fail "the header check's build refers to this source tree's headers"
fi
cmake --build "$WORK/headers/build" >>"$WORK/headers.log" 2>&1 ||
  fail "an installed header does not compile alone, or ddp-train's main not against the package: $(grep -m5 -e 'error' "$WORK/headers.log")"
echo "installed_example_test: $(echo "$headers" | wc -l) installed headers, each compiles alone; so does ddp-train's main"

# The example sees the installed package and nothing of this source tree.
cmake -S "$SOURCE/runtime/examples/spirals" -B "$WORK/example" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$PREFIX" >"$WORK/configure.log" 2>&1 || fail "configure: $(tail -20 "$WORK/configure.log")"
grep -q "SlurmDDP_DIR:PATH=$PREFIX/lib" "$WORK/example/CMakeCache.txt" || fail "SlurmDDP was not found in $PREFIX"
if grep -q -e "$SOURCE/src" -e "$SOURCE/include" -e "$SOURCE/runtime/ddp_runtime" "$WORK/example/build.ninja"; then
  fail "the example build refers to this source tree's headers"
fi
cmake --build "$WORK/example" >"$WORK/build.log" 2>&1 || fail "build: $(tail -30 "$WORK/build.log")"

# Two ranks, as srun --ddp starts them.
two_ranks() {  # LOG_PREFIX ARGS...
  local log=$1 port rank
  shift
  port=$("${DDP_TEST_PORT:?the test runs under ctest, which names ddp-test-port}" $$)
  PIDS=()
  for rank in 0 1; do
    env RANK=$rank LOCAL_RANK=$rank WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" \
      OMP_NUM_THREADS=1 "$WORK/example/spirals" --snapshot-dir "$WORK/snapshots" --output "$WORK/final.pt" \
      --samples 600 --optimizer adamw --lr 0.01 "$@" >"$WORK/$log$rank.log" 2>&1 &
    PIDS+=($!)
  done
  for rank in 0 1; do wait "${PIDS[$rank]}" || fail "rank $rank exited with $?: $(cat "$WORK/$log$rank.log")"; done
  PIDS=()
}

two_ranks first 4 1
grep -q '^\[CPU0\] Epoch 3 | Batchsize: 32 | Steps: 10$' "$WORK/first0.log" || fail "no seed line on rank 0: $(cat "$WORK/first0.log")"
grep -q '^\[CPU1\] Epoch 3 | Batchsize: 32 | Steps: 10$' "$WORK/first1.log" || fail "no seed line on rank 1: $(cat "$WORK/first1.log")"
grep -q "^Epoch 3 | Training snapshot saved at $WORK/snapshots/snapshot-e000004-s000000000040-rdefault.pt$" "$WORK/first0.log" ||
  fail "no snapshot line: $(cat "$WORK/first0.log")"
grep -q "^Final model saved at $WORK/final.pt$" "$WORK/first0.log" || fail "no final model line"
first_loss=$(sed -n 's/^Epoch 0 | Loss: \([0-9.]*\) .*/\1/p' "$WORK/first0.log")
last_loss=$(sed -n 's/^Epoch 3 | Loss: \([0-9.]*\) .*/\1/p' "$WORK/first0.log")
python3 -c "import sys; sys.exit(0 if $last_loss < $first_loss else 1)" || fail "the loss did not fall: $first_loss -> $last_loss"

two_ranks resumed 6 1
grep -q "^Resuming training from snapshot at Epoch 4 ($WORK/snapshots/snapshot-e000004-s000000000040-rdefault.pt)$" "$WORK/resumed0.log" ||
  fail "no resume: $(cat "$WORK/resumed0.log")"
if grep -q '^\[CPU0\] Epoch 3 ' "$WORK/resumed0.log"; then fail "epoch 3 ran again after the resume"; fi
grep -q '^\[CPU0\] Epoch 5 | Batchsize: 32 | Steps: 10$' "$WORK/resumed0.log" || fail "epoch 5 did not run"

# The .deb of the same component holds the same files.
(cd "$WORK" && cpack -G DEB -D CPACK_COMPONENTS_ALL=dev --config "$BUILD/CPackConfig.cmake" >cpack.log 2>&1) ||
  fail "cpack: $(tail -5 "$WORK/cpack.log")"
deb=$(ls "$WORK"/slurm-ddp-dev_*.deb) || fail "no slurm-ddp-dev package: $(ls "$WORK")"
in_deb=$(dpkg-deb -c "$deb" | awk '$1 !~ /^d/ {print $NF}' | sed 's|^\./||' | sort)
installed=$(cd "$WORK/prefix" && find . -type f | sed 's|^\./||' | sort)
[ "$in_deb" = "$installed" ] || fail "the .deb and cmake --install differ: $(diff <(echo "$in_deb") <(echo "$installed"))"
echo "installed_example_test: OK"
