#!/usr/bin/env bash
# One entry point for people and CI:
#   ./run.sh                 install what is missing, build, and run the demo job on the local two-node Slurm
#   ./run.sh test [--stack S] [CTEST ARGS...]
#                            install what is missing, build, and run every test (unit and real-cluster) on every
#                            stack, or on stack S only; CTEST ARGS (e.g. -R cluster_) go to each stack's ctest
#   ./run.sh setup           install what is missing and build, nothing else
#   ./run.sh nccl [CTEST ARGS]
#                            the NCCL leg alone: ddp-train and the runtime's tests built against Debian 13's CUDA
#                            LibTorch (in build-debian13-nccl/), tests run without a GPU; part of `test` (debian13)
#   ./run.sh pcluster        the ParallelCluster leg alone: a root like a ParallelCluster head node with Slurm 25.11
#                            built from third_party/slurm into /opt/slurm (cached), where the head-node action installs
#                            slurm-ddp from a tarball of this checkout and tests/pcluster runs it; part of `test`
# Stacks: debian12 (Slurm 22.05, LibTorch 1.13, OpenMPI 4.1), debian13 (Slurm 24.11, LibTorch 2.6, OpenMPI 5) and
# debian14 (forky, Debian testing: Slurm 26.05, LibTorch 2.14, OpenMPI 6).
# The one this machine runs is tested here; the others in a Debian root file system that tests/stacks/root.sh makes
# with debootstrap (cached in /var/cache/slurm-ddp/roots) and enters with its own namespaces.
# Needs root for apt-get, the roots and the test cluster (network namespaces, slurmd).
set -euo pipefail
cd "$(dirname "$0")"
ROOT=$PWD

# The same names in bookworm and trixie (libclang-rt-dev is clang's default runtime there, 14 and 19). runc and
# charliecloud-runtime (ch-run) are the container runtimes the cluster tests start (tests/cluster/containers.sh).
# bindfs: one directory seen through two FUSE mounts whose locks stay their own, the node-local locks of
# doctor.cli_storage_locks.
PACKAGES=(
  cmake ninja-build g++ clang libclang-rt-dev pkg-config
  libslurm-dev slurmctld slurmd slurm-client munge
  libhwloc-dev hwloc
  libopenmpi-dev openmpi-bin
  libtorch-dev libgloo-dev libopenblas0-pthread python3-torch
  libgtest-dev nlohmann-json3-dev
  iproute2 procps psmisc util-linux e2fsprogs shellcheck python3-yaml clang-format bindfs
  file dpkg-dev bc debootstrap rpm
  runc charliecloud-runtime
)
declare -A RELEASE_OF=([debian12]=bookworm [debian13]=trixie [debian14]=forky)
STACKS=(debian12 debian13 debian14)

# The pipeline's order: this machine's stack, then the roots newest first. The newest takes the longest to build
# (GCC 16, C++20) and to test; started before the others, its suite no longer ends the whole run (about 200 s sooner
# on CI's 2 cores).
pipeline_stacks() {
  local s i
  host_stack
  for ((i = ${#STACKS[@]} - 1; i >= 0; i--)); do
    s=${STACKS[$i]}
    [ "$s" = "$(host_stack)" ] || echo "$s"
  done
}

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
  for s in "${!RELEASE_OF[@]}"; do [ "${RELEASE_OF[$s]}" != "$codename" ] || echo "$s"; done
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
    -DDDP_TEST_SCALE="$(on_the_host)" -DDDP_TEST_INSTALL_SCRIPT="$(on_the_host)" \
    -DDDP_TEST_GPU_CHECK="$([ "$stack" = debian13 ] && echo ON || echo OFF)" \
    -DDDP_TEST_RECOVER_CLUSTER="$([ "$stack" = debian14 ] && echo ON || echo OFF)" \
    -DDDP_UNITY_BUILD=ON -DCMAKE_CXX_STANDARD=$standard >/dev/null
  cmake --build "$dir" -j "$(nproc)"
}

# What does not depend on the stack runs once, on this machine's: the fuzz targets (the core's parsers, which use
# no library of the stack), the sanitizer leg, the 32-node scale test and the head-node install script's own build
# of the plugin. ON here, OFF in a root. Recovery in place under Slurm (minutes) runs on the newest Slurm, whose
# signals to a step's survivors changed: ddp-train's recovery is the same code on every stack, and its runtime
# tests run on each.
on_the_host() { if [ -z "${DDP_IN_ROOT:-}" ]; then echo ON; else echo OFF; fi; }

run_tests() {
  # Cluster tests bring up their own Slurm through a CTest fixture and tear it down, also on failure.
  ctest --test-dir "$(build_dir "$(host_stack)")" --output-on-failure -j 1 "$@"
}

# ---- Sanitizer leg: the unit tests that need no LibTorch (core, topology, launch, doctor with
# its CLI tests) built again with AddressSanitizer and UndefinedBehaviorSanitizer in BUILD-sanitize; any finding
# stops the program and fails its test. LibTorch's code is not instrumented, so the runtime's tests stay out.
sanitizer_leg() { sanitizer_build && sanitizer_tests; }
sanitizer_build_dir() { echo "$(build_dir "$(host_stack)")-sanitize"; }
sanitizer_build() {
  local dir
  dir=$(sanitizer_build_dir)
  # In unity batches, as every stack builds: 258 s of CPU against 430 s a translation unit at a time, CPU that the
  # suites beside it need.
  cmake -S "$ROOT" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DDDP_SANITIZE=ON -DDDP_BUILD_RUNTIME=OFF \
    -DDDP_BUILD_PLUGIN=OFF -DDDP_UNITY_BUILD=ON >/dev/null &&
    cmake --build "$dir" -j "$(nproc)" --target core_tests store_tests topology_tests launch_tests doctor_tests \
      ddp-doctor ddp-topo ddp-test-port fake_nvml
}
sanitizer_tests() {
  ctest --test-dir "$(sanitizer_build_dir)" --output-on-failure -j 1 -R '^(core|store|topology|launch|doctor)\.'
}
# ---- end of the sanitizer leg

# ---- NCCL leg (debian13 only): ddp-train's NCCL path (DDP_WITH_NCCL) compiled and linked against Debian 13's CUDA
# LibTorch, and the runtime's tests run on that build, on this machine without a GPU (the GPU-only ones skip).
# tests/stacks/cuda_libtorch.sh unpacks the CUDA LibTorch, CUDA's headers and nccl.h into a cache of its own, with a
# stub cuDNN; tests/stacks/cuda_libtorch.cmake stands in for the CUDA toolkit its CMake package asks for, and gives
# the programs an RPATH to those libraries (the environment stays clean for Debian's python3-torch). Only
# ddp-train and runtime_tests are built, in build-debian13-nccl/, without the installed-package test (minutes).
nccl_build_dir() { echo "$ROOT/build-debian13-nccl"; }

nccl_build() {
  local dir log
  dir=$(nccl_build_dir)
  eval "$("$ROOT/tests/stacks/cuda_libtorch.sh" env)"  # Torch_DIR, CMAKE_PREFIX_PATH
  # In the cache too, so that a later regeneration without this environment finds the same LibTorch.
  # shellcheck disable=SC2154  # Torch_DIR comes from the eval
  log=$(cmake -S "$ROOT" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_STANDARD=20 -DDDP_FUZZ=OFF \
    -DDDP_UNITY_BUILD=ON -DDDP_BUILD_PLUGIN=OFF -DTorch_DIR="$Torch_DIR" -DCMAKE_PREFIX_PATH="$CMAKE_PREFIX_PATH" \
    -DCMAKE_PROJECT_INCLUDE="$ROOT/tests/stacks/cuda_libtorch.cmake" 2>&1) ||
    { echo "$log"; return 1; }
  grep -q 'NCCL backend enabled' <<<"$log" ||
    { echo "$log"; echo "run.sh: the CUDA LibTorch build did not enable the NCCL backend (see above)" >&2; return 1; }
  cmake --build "$dir" -j "$(nproc)" --target ddp-train runtime_tests
}

# Bad input at configure time, against the same CUDA LibTorch: without nccl.h (hidden with CMAKE_IGNORE_PATH) the
# configure warns and goes on, naming NCCL_HOME and NCCL_INCLUDE_DIR; a NCCL_INCLUDE_DIR without nccl.h fails.
nccl_configure_checks() {
  local dir status=0
  dir=$(mktemp -d)
  eval "$("$ROOT/tests/stacks/cuda_libtorch.sh" env)"
  local args=(-S "$ROOT" -G Ninja -DDDP_FUZZ=OFF -DDDP_BUILD_PLUGIN=OFF -DBUILD_TESTING=OFF -DTorch_DIR="$Torch_DIR"
    -DCMAKE_PREFIX_PATH="$CMAKE_PREFIX_PATH" -DCMAKE_PROJECT_INCLUDE="$ROOT/tests/stacks/cuda_libtorch.cmake")
  expect_configure 0 'has CUDA but nccl.h was not found: the NCCL backend is not built; point at NCCL with NCCL_HOME' \
    "${args[@]}" -B "$dir/no-nccl" -DCMAKE_IGNORE_PATH="$CMAKE_PREFIX_PATH/include" || status=1
  expect_configure 1 'NCCL_INCLUDE_DIR=/nonexistent has no nccl.h; point at NCCL with NCCL_HOME' \
    "${args[@]}" -B "$dir/bad-dir" -DNCCL_INCLUDE_DIR=/nonexistent || status=1
  rm -rf "$dir"
  return "$status"
}

expect_configure() {  # STATUS TEXT CMAKE-ARGS...
  local want=$1 text=$2 out got=0
  shift 2
  out=$(cmake "$@" 2>&1) || got=1
  [ "$got" = "$want" ] && grep -qF "$text" <<<"$(tr -s ' \n' ' ' <<<"$out")" && return 0
  echo "$out"
  echo "run.sh: cmake $* exited with status $got, not $want, or did not say: $text" >&2
  return 1
}

# What the CUDA build changes, without a GPU: the device and backend choice and the GPU tests (which skip), ddp-train
# end to end with its refusals and resumes, snapshots, the Reducer over Gloo, the sampler. The --model runs against
# Python DDP (DdpTrainModel, about 40 s each) check the same CPU code as every stack's suite and stay out of it.
nccl_tests() {
  ctest --test-dir "$(nccl_build_dir)" --output-on-failure -j 1 \
    -R '^runtime\.(RankDevice|BackendChoice|CudaTensors|CudaSnapshots|DdpTrain|Snapshot|DistributedModel|Sampler)\.' "$@"
}

# From the host: the download with the network, then the build and the tests, in the trixie root (isolated) where
# this machine is not Debian 13.
nccl_leg() {
  local t0=$SECONDS t1 rc=0 online=() isolated=()
  if [ "$(host_stack)" != debian13 ]; then
    "$ROOT/tests/stacks/root.sh" create trixie >/dev/null || return 1
    online=("$ROOT/tests/stacks/root.sh" run trixie --)
    isolated=("$ROOT/tests/stacks/root.sh" run trixie --isolated --)
  fi
  "${online[@]}" ./run.sh __install || return 1
  "${online[@]}" tests/stacks/cuda_libtorch.sh fetch || return 1
  t1=$SECONDS
  "${isolated[@]}" ./run.sh __nccl "$@" || rc=$?
  echo "run.sh: NCCL leg: CUDA LibTorch ready in $((t1 - t0)) s, built and tested in $((SECONDS - t1)) s"
  return "$rc"
}
# ---- end of the NCCL leg

# ---- ParallelCluster leg (tests/stacks/pcluster.sh, tests/pcluster): the root and its packages (network), Slurm
# 25.11.6 built into it once per machine, then the leg, from a tarball of this checkout (build-pcluster/), as an admin
# uploads it. Small on purpose: the whole suite runs on the three stacks; this leg checks the install and the
# contract on ParallelCluster's Slurm and layout.
pcluster_dir() { echo "$ROOT/build-pcluster"; }
pcluster_prepare() { "$ROOT/tests/stacks/pcluster.sh" prepare; }
pcluster_build() { "$ROOT/tests/stacks/pcluster.sh" build-slurm; }
pcluster_test() {
  mkdir -p "$(pcluster_dir)"
  "$ROOT/tests/stacks/pcluster.sh" tarball "$(pcluster_dir)/slurm-ddp.tar.gz"
  "$ROOT/tests/stacks/pcluster.sh" test "$(pcluster_dir)/slurm-ddp.tar.gz"
}
pcluster_leg() { pcluster_prepare && pcluster_build && pcluster_test; }
# ---- end of the ParallelCluster leg

# Tests of one stack: here, or inside its root (packages installed with the host's network, tests in a network
# namespace of their own, so that they meet neither the network nor a test cluster of this machine).
test_stack() {
  local stack=$1 release status=0
  shift
  if [ "$stack" = "$(host_stack)" ]; then
    install_packages
    build
    run_tests "$@" || status=$?
    # With the whole suite only, not a chosen part of it, and on this machine's stack only.
    [ $# -gt 0 ] || [ "$(on_the_host)" = OFF ] || sanitizer_leg || status=$?
  else
    release=${RELEASE_OF[$stack]}
    prepare_root "$stack"
    in_root "$stack" ./run.sh test --stack "$stack" "$@" || status=$?
  fi
  # With Debian 13's whole suite, started from the host (inside the root, the caller outside runs it).
  if [ "$stack" = debian13 ] && [ $# -eq 0 ] && [ -z "${DDP_IN_ROOT:-}" ]; then nccl_leg || status=$?; fi
  return "$status"
}

prepare_root() {  # STACK: the root made once (debootstrap) and the packages installed, with the network
  local release=${RELEASE_OF[$1]}
  "$ROOT/tests/stacks/root.sh" create "$release" >/dev/null && "$ROOT/tests/stacks/root.sh" run "$release" -- ./run.sh __install
}

in_root() {  # STACK CMD...: CMD in the stack's root, isolated from the network (this machine's stack: here)
  local stack=$1
  shift
  if [ "$stack" = "$(host_stack)" ]; then "$@"; else "$ROOT/tests/stacks/root.sh" run "${RELEASE_OF[$stack]}" --isolated -- "$@"; fi
}

# ---- The whole test of every stack, as a pipeline. On CI's 2 cores the builds compute while the suites mostly wait
# (daemons, ranks, time-outs): one after another, three stacks, the NCCL leg and the sanitizer leg take far longer
# than the same work overlapped. Three lanes:
#   prepare   the roots and the CUDA LibTorch from the network, one after another;
#   build     every build, one after another: this machine's first, at normal priority, since the first suite waits
#             for it; then, at the lowest CPU priority (an idle CPU cgroup, else nice 19 in a session of its own),
#             each root's (their suites are the longest), the sanitizer leg's and the NCCL leg's;
#   test      this shell: each suite as soon as its build is ready, at normal priority, so that a build never eats
#             into a test's deadlines; at most DDP_TEST_LANES suites at once (2: a suite mostly waits).
# Each lane marks what it finished in a state directory (NAME.ok or NAME.failed); the build and prepare lanes'
# output is printed as each build or root ends.
readonly LOW_CPU_CGROUP=/sys/fs/cgroup/cpu/slurm-ddp-builds

# Moves this shell, and whatever it starts, to the lowest CPU priority.
lowest_cpu_priority() {
  if mkdir -p "$LOW_CPU_CGROUP" 2>/dev/null && echo 1 >"$LOW_CPU_CGROUP/cpu.idle" 2>/dev/null &&
    echo "$BASHPID" >"$LOW_CPU_CGROUP/cgroup.procs" 2>/dev/null; then
    echo "run.sh: builds after the first run in the idle CPU cgroup $LOW_CPU_CGROUP"
    return 0
  fi
  # A session of its own is an autogroup of its own: nice it as a whole, else its processes share the CPU with the
  # tests' sessions as equals whatever their nice value.
  echo 19 >"/proc/$BASHPID/autogroup" 2>/dev/null || true
  renice -n 19 -p "$BASHPID" >/dev/null || true
  echo "run.sh: no idle CPU cgroup here; builds after the first run at nice 19"
}

# The ParallelCluster leg beside a stack's suite: its cluster, its builds and a job that trains flat out during its
# upgrade, at a quarter of the weight of a session of the suite's, so that the suite's deadlines hold (seen: a 25 s
# test of 2-rank trainings took over 120 s beside the leg's upgrade). Whatever the suite leaves idle the leg takes.
readonly LIGHT_CPU_CGROUP=/sys/fs/cgroup/cpu/slurm-ddp-pcluster
light_cpu_weight() {
  if mkdir -p "$LIGHT_CPU_CGROUP" 2>/dev/null && echo 256 >"$LIGHT_CPU_CGROUP/cpu.shares" 2>/dev/null &&
    echo "$BASHPID" >"$LIGHT_CPU_CGROUP/cgroup.procs" 2>/dev/null; then
    echo "run.sh: the ParallelCluster leg in the CPU cgroup $LIGHT_CPU_CGROUP (cpu.shares 256)"
  else
    echo "run.sh: no CPU cgroup here; the ParallelCluster leg at the suites' weight"
  fi
}

mark() {  # STATE NAME COMMAND...: runs COMMAND, then marks NAME ok or failed
  local state=$1 name=$2 t0=$SECONDS
  shift 2
  if "$@" >"$state/$name.log" 2>&1; then
    echo "run.sh: $name ready in $((SECONDS - t0)) s" >>"$state/$name.log"
    touch "$state/$name.ok"
  else
    echo "run.sh: $name FAILED after $((SECONDS - t0)) s" >>"$state/$name.log"
    touch "$state/$name.failed"
  fi
}

wait_for_mark() {  # STATE NAME: 0 once NAME is ok, 1 once it failed (its log printed)
  local state=$1 name=$2
  until [ -e "$state/$name.ok" ] || [ -e "$state/$name.failed" ]; do sleep 2; done
  if [ -e "$state/$name.ok" ]; then tail -n 1 "$state/$name.log"; return 0; fi
  cat "$state/$name.log"
  return 1
}

prepare_lane() {  # STATE
  local state=$1 s
  for s in $(pipeline_stacks); do [ "$s" = "$(host_stack)" ] || mark "$state" "prepare-$s" prepare_root "$s"; done
  mark "$state" prepare-pcluster pcluster_prepare
  mark "$state" prepare-cuda in_root_online debian13 tests/stacks/cuda_libtorch.sh fetch
}

in_root_online() {  # STACK CMD...: as in_root, with the network (downloads)
  local stack=$1
  shift
  if [ "$stack" = "$(host_stack)" ]; then "$@"; else "$ROOT/tests/stacks/root.sh" run "${RELEASE_OF[$stack]}" -- "$@"; fi
}

build_lane() {  # STATE
  local state=$1 s
  mark "$state" "build-$(host_stack)" build
  lowest_cpu_priority
  # The stacks first: their suites are the longest, and the sanitizer's takes a minute.
  for s in $(pipeline_stacks); do
    [ "$s" != "$(host_stack)" ] || continue
    if wait_for_mark "$state" "prepare-$s" >/dev/null; then
      mark "$state" "build-$s" in_root "$s" ./run.sh __build
    else
      touch "$state/build-$s.failed"
    fi
  done
  # Slurm for the ParallelCluster leg (minutes once per machine, then cached), before the legs that take a minute.
  if wait_for_mark "$state" prepare-pcluster >/dev/null; then
    mark "$state" build-pcluster pcluster_build
  else
    touch "$state/build-pcluster.failed"
  fi
  mark "$state" build-sanitizer sanitizer_build
  if wait_for_mark "$state" prepare-cuda >/dev/null; then
    mark "$state" build-nccl in_root debian13 ./run.sh __nccl_build
  else
    touch "$state/build-nccl.failed"
  fi
}

# The suites of the pipeline, each once its build is ready: NAME and the command that runs it.
declare -A SUITE_RUN=()
SUITE_ORDER=()
plan_suites() {  # CTEST ARGS...
  local s
  for s in $(pipeline_stacks); do
    SUITE_ORDER+=("$s")
    SUITE_RUN[$s]="in_root $s ./run.sh __test $(printf '%q ' "$@")"
  done
  [ $# -eq 0 ] || return 0
  # With the whole suite only: the ParallelCluster, sanitizer and NCCL legs, built in this order after the stacks.
  SUITE_ORDER+=(pcluster sanitizer nccl)
  SUITE_RUN[pcluster]="light_cpu_weight; pcluster_test"
  SUITE_RUN[sanitizer]="sanitizer_tests"
  SUITE_RUN[nccl]="in_root debian13 ./run.sh __nccl_test"
}

build_of() { case $1 in sanitizer) echo build-sanitizer ;; nccl) echo build-nccl ;; pcluster) echo build-pcluster ;; *) echo "build-$1" ;; esac; }

# Runs the suites, at most DDP_TEST_LANES at once; each one's output is printed whole when it ends.
# Sets SUITES_FAILED.
SUITES_FAILED=()
run_suites() {  # STATE
  local state=$1 lanes=${DDP_TEST_LANES:-2} name running=()
  local -A pid_of=()
  for name in "${SUITE_ORDER[@]}"; do
    if ! wait_for_mark "$state" "$(build_of "$name")"; then
      echo "run.sh: suite $name not run: its build failed"
      SUITES_FAILED+=("$name")
      continue
    fi
    while [ "${#running[@]}" -ge "$lanes" ]; do reap_suite "$state"; done
    echo "run.sh: ===== suite $name: started at $((SECONDS - PIPELINE_T0)) s ====="
    (
      rc=0
      (eval "${SUITE_RUN[$name]}") || rc=$?
      echo "$rc" >"$state/suite-$name.rc"
    ) >"$state/suite-$name.log" 2>&1 &
    pid_of[$name]=$!
    running+=("$name")
  done
  while [ "${#running[@]}" -gt 0 ]; do reap_suite "$state"; done
}

# Waits for one running suite to end, prints its output and drops it from `running` (run_suites' locals). Each
# suite leaves its exit status in the state directory: `wait -n` missed suites that had ended while this shell
# waited for a build (seen: a free lane held until the other suite ended).
reap_suite() {  # STATE
  local state=$1 name rc=0 ended=() still=()
  while :; do
    for name in "${running[@]}"; do
      if [ -e "$state/suite-$name.rc" ]; then ended+=("$name"); else still+=("$name"); fi
    done
    [ ${#ended[@]} -eq 0 ] || break
    still=()
    sleep 2
  done
  for name in "${ended[@]}"; do
    wait "${pid_of[$name]}" 2>/dev/null || true
    rc=$(cat "$state/suite-$name.rc")
    unset "pid_of[$name]"
    echo "run.sh: ===== suite $name ====="
    cat "$state/suite-$name.log"
    if [ "$rc" = 0 ]; then
      echo "run.sh: suite $name passed (ended at $((SECONDS - PIPELINE_T0)) s)"
    else
      echo "run.sh: suite $name FAILED with status $rc (ended at $((SECONDS - PIPELINE_T0)) s)"
      SUITES_FAILED+=("$name")
      failed_tests_of "$name" <"$state/suite-$name.log" >>"$state/failures.txt"
    fi
  done
  running=("${still[@]}")
}

# What a failed suite's log says of its failed tests: each one's result line and the last lines it printed, then
# ctest's list. run_pipeline prints these again last, since a suite's whole log may end long before the run does
# and only the run's end is sure to be read.
failed_tests_of() {  # NAME < LOG
  echo "run.sh: ===== suite $1: what failed ====="
  awk -v keep=40 '
    # The lines that say why (a test script'"'"'s FAIL line, a GoogleTest failure, an assertion), wherever they are, then
    # the last lines: a script may print the daemon logs or a whole report after its reason.
    function flush(  i, from) {
      from = n > keep ? n - keep + 1 : 1
      for (i = 1; i < from; i++) if (buf[i] ~ /^FAIL|: Failure$|[Aa]ssertion|Error:|error:/) print buf[i]
      if (from > 1) print "[...]"
      for (i = from; i <= n; i++) print buf[i]
      n = 0; on = 0
    }
    /^ *Start +[0-9]+: / || /^[0-9]+% tests passed/ { if (on) flush() }
    /Test +#[0-9]+: .*\*\*\*/ && !/\*\*\*Skipped/ { if (on) flush(); print; on = 1; next }
    on { buf[++n] = $0 }
    /^The following tests FAILED:/ { list = 1 }
    list { print }
    END { if (on) flush() }
  '
}

run_pipeline() {  # CTEST ARGS...
  local state prepare_pid build_pid status=0
  PIPELINE_T0=$SECONDS
  state=$(mktemp -d /tmp/ddp-pipeline.XXXXXX)
  install_packages
  setsid "$ROOT/run.sh" __prepare_lane "$state" &
  prepare_pid=$!
  setsid "$ROOT/run.sh" __build_lane "$state" &
  build_pid=$!
  # shellcheck disable=SC2064  # the pids are known now
  # `|| true`: after a whole run the lanes have ended and kill finds no group; set -e holds in the trap, and a
  # failed kill there made the run exit 1 after every suite had passed.
  trap "kill -- -$build_pid -$prepare_pid 2>/dev/null || true; rm -rf $(printf %q "$state")" EXIT
  plan_suites "$@"
  run_suites "$state"
  wait "$prepare_pid" "$build_pid" || true
  for log in "$state"/prepare-*.log "$state"/build-*.log; do
    if [ -e "$log" ]; then tail -n 1 "$log"; fi
  done
  rmdir "$LOW_CPU_CGROUP" "$LIGHT_CPU_CGROUP" 2>/dev/null || true
  if [ -s "$state/failures.txt" ]; then cat "$state/failures.txt"; fi
  [ ${#SUITES_FAILED[@]} -eq 0 ] || status=1
  return "$status"
}

cmd_test() {
  local chosen=("${STACKS[@]}") failed=() s t0
  if [ "${1:-}" = --stack ]; then
    [ -n "${RELEASE_OF[${2:-}]+x}" ] || { echo "run.sh: --stack '${2:-}': give one of ${!RELEASE_OF[*]}" >&2; exit 2; }
    chosen=("$2")
    shift 2
  fi
  [ -n "$(host_stack)" ] || { echo "run.sh: this machine runs none of Debian 12, 13 and 14; the stacks need one of them" >&2; exit 2; }
  if [ ${#chosen[@]} -eq 1 ]; then
    s=${chosen[0]}
    t0=$SECONDS
    echo "run.sh: ===== stack $s (Debian ${RELEASE_OF[$s]}) ====="
    if test_stack "$s" "$@"; then
      echo "run.sh: stack $s passed in $((SECONDS - t0)) s"
    else
      echo "run.sh: stack $s FAILED after $((SECONDS - t0)) s"
      failed+=("$s")
    fi
  else
    run_pipeline "$@" || failed+=("${SUITES_FAILED[@]}")
  fi
  [ ${#failed[@]} -eq 0 ] || { echo "run.sh: failed on: ${failed[*]}" >&2; exit 1; }
  # Every stack passed its suite: their snapshots must also resume on each other (the whole suite only).
  if [ ${#chosen[@]} -eq ${#STACKS[@]} ] && [ $# -eq 0 ]; then
    local roots=()
    for s in "${STACKS[@]}"; do [ "$s" = "$(host_stack)" ] || roots+=("$(build_dir "$s"):${RELEASE_OF[$s]}"); done
    "$ROOT/tests/stacks/cross_stack.sh" "$(build_dir "$(host_stack)")" "${roots[@]}" ||
      { echo "run.sh: snapshots do not move among the stacks" >&2; exit 1; }
  fi
  echo "run.sh: every stack passed in $SECONDS s"
}

case "${1:-demo}" in
  setup) install_packages; build ;;
  test) shift; cmd_test "$@" ;;
  demo) install_packages; build; exec "$ROOT/tests/cluster/demo.sh" "$(build_dir "$(host_stack)")" ;;
  nccl) shift; nccl_leg "$@" ;;
  pcluster) pcluster_leg ;;
  __install) install_packages ;;  # inside a root, with the host's network (test_stack)
  __nccl) shift; nccl_build && nccl_configure_checks && nccl_tests "$@" ;;  # inside the trixie root, or on Debian 13 (nccl_leg)
  # The pipeline's parts (run_pipeline), inside a root or here.
  __prepare_lane) prepare_lane "$2" ;;
  __build_lane) build_lane "$2" ;;
  __build) build ;;
  __test) shift; run_tests "$@" ;;
  __nccl_build) nccl_build && nccl_configure_checks ;;
  __nccl_test) shift; nccl_tests "$@" ;;
  *) echo "usage: $0 [demo|test [--stack debian12|debian13|debian14] [CTEST ARGS]|setup|nccl [CTEST ARGS]|pcluster]" >&2; exit 2 ;;
esac
