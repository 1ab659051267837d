#!/usr/bin/env bash
# A GPU check anyone can run on a machine with NVIDIA GPUs and a CUDA PyTorch wheel; no Slurm, no root, no
# package downloads:
#   tests/gpu/check.sh [options]
# 1. builds ddp-train, ddp-topo and ddp-doctor against the wheel's LibTorch (torch.utils.cmake_prefix_path) and the
#    nvidia-nccl wheel's nccl.h, with CMake and ninja, plugin and tests off; hwloc and nlohmann-json come from the
#    Debian packages in third_party/debs when the machine has no hwloc headers (see third_party/debs/README.md);
# 2. trains the seed workload and a --model run (a scripted MLP on a .pt data file) on NCCL, one rank per GPU,
#    ranks started with torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR=127.0.0.1, MASTER_PORT);
# 3. trains the same in Python DDP on NCCL (tests/runtime/python/model_io.py) and compares the final weights;
# 4. prints both samples/s, ddp-topo's plan of this machine and ddp-doctor's GPU checks; ends with one table.
# Options:
#   --cpu            the same flow on the CPU over Gloo (2 ranks unless --ranks): for machines without a GPU, CI
#   --ranks N        ranks (default: one per GPU; 2 with --cpu)
#   --torch-dir DIR  the directory of TorchConfig.cmake, when the wheel's cmake_prefix_path has none (Debian's
#                    python3-torch: /usr/lib/x86_64-linux-gnu/cmake/Torch)
#   --python PY      the Python that has torch (default: $PYTHON, else python3)
#   --build-dir DIR  (default: build-gpu-check in the checkout)
#   --hwloc auto|bundled|system
#                    system: pkg-config's hwloc; bundled: third_party/debs; auto (default): system where pkg-config
#                    finds it, else bundled
#   --epochs N       epochs of each run (default 20; the seed's data set is 2048 samples)
#   --quick          2 epochs and 256 samples: seconds, for CTest
#   --jobs N         build jobs (default: the number of CPUs)
#   --prebuilt DIR   use the binaries of an existing build DIR instead of configuring and building (CTest's
#                    gpu.check_cpu: the flow without the minutes of a second build)
# Exit status: 0 every check passed, 1 a check failed, 2 the machine lacks what the check needs (one line: the fix).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
MODEL_IO=$ROOT/tests/runtime/python/model_io.py
DEBS=$ROOT/third_party/debs
# Final weights of ddp-train and Python DDP agree within these (torch.allclose). On the CPU the two run the same
# kernels in the same order: the runtime's own tests hold them to rtol 1e-4, atol 1e-5. On a GPU, cuBLAS and the
# reduction order of NCCL's all-reduce may differ between runs, so one order looser.
RTOL_CPU=1e-4 ATOL_CPU=1e-5
RTOL_GPU=1e-3 ATOL_GPU=1e-4

CPU=false RANKS="" TORCH_DIR="" PY=${PYTHON:-python3} BUILD="" HWLOC=auto EPOCHS=20 SAMPLES=2048 JOBS="" PREBUILT=false
RESULTS=()  # "check|result|figure" rows of the closing table
FAILED=false

die() {  # a missing prerequisite: one line naming the fix, exit status 2
  echo "check.sh: $*" >&2
  exit 2
}

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

parse_args() {
  while [ $# -gt 0 ]; do
    case $1 in
      --cpu) CPU=true ;;
      --ranks) RANKS=$2; shift ;;
      --torch-dir) TORCH_DIR=$2; shift ;;
      --python) PY=$2; shift ;;
      --build-dir) BUILD=$2; shift ;;
      --hwloc) HWLOC=$2; shift ;;
      --epochs) EPOCHS=$2; shift ;;
      --quick) EPOCHS=2 SAMPLES=256 ;;
      --jobs) JOBS=$2; shift ;;
      --prebuilt) BUILD=$2 PREBUILT=true; shift ;;
      -h | --help) usage; exit 0 ;;
      *) echo "check.sh: unknown option '$1' (--help lists them)" >&2; exit 2 ;;
    esac
    shift
  done
  case $HWLOC in auto | bundled | system) ;; *) die "--hwloc $HWLOC: use auto, bundled or system" ;; esac
  BUILD=${BUILD:-$ROOT/build-gpu-check}
  JOBS=${JOBS:-$(nproc)}
}

record() {  # check, result (pass/FAIL/skip), figure
  RESULTS+=("$1|$2|$3")
  [ "$2" != FAIL ] || FAILED=true
}

# ---- what the machine must have -------------------------------------------------------------------------------

torch_query() { "$PY" -c "import torch; $1" 2>/dev/null; }

check_prerequisites() {
  command -v cmake >/dev/null || die "cmake not found: pip install cmake (or your distribution's cmake package)"
  command -v ninja >/dev/null || die "ninja not found: pip install ninja (or your distribution's ninja-build)"
  command -v "$PY" >/dev/null || die "$PY not found: pass --python PATH, the Python that has torch"
  torch_query 'pass' || die "$PY cannot import torch: pip install torch (a CUDA wheel), or pass --python PATH"
  TORCH_VERSION=$(torch_query 'print(torch.__version__.split("+")[0])')
  SITE=$(dirname "$(dirname "$(torch_query 'print(torch.__file__)')")")  # site-packages
  if $CPU; then
    RANKS=${RANKS:-2} BACKEND=gloo DEVICE=cpu
    return
  fi
  BACKEND=nccl DEVICE=cuda
  [ -n "$(torch_query 'print(torch.version.cuda or "")')" ] ||
    die "torch $TORCH_VERSION has no CUDA: install a CUDA wheel (pip install torch --index-url https://download.pytorch.org/whl/cu128, or your CUDA's), or run with --cpu"
  local gpus
  gpus=$(torch_query 'print(torch.cuda.device_count())' || echo 0)
  if [ "${gpus:-0}" -eq 0 ]; then
    command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 &&
      die "nvidia-smi sees GPUs but torch.cuda.device_count() is 0: the wheel's CUDA is newer than the driver, or CUDA_VISIBLE_DEVICES hides them; install a wheel for this driver's CUDA"
    die "no GPU: nvidia-smi and torch.cuda.device_count() see none; run on a GPU machine, or with --cpu"
  fi
  RANKS=${RANKS:-$gpus}
  NCCL_INCLUDE=${NCCL_HOME:+$NCCL_HOME/include}
  [ -f "${NCCL_INCLUDE:-/nonexistent}/nccl.h" ] || NCCL_INCLUDE=$SITE/nvidia/nccl/include
  [ -f "$NCCL_INCLUDE/nccl.h" ] ||
    die "no nccl.h (looked in \$NCCL_HOME/include and $NCCL_INCLUDE): pip install nvidia-nccl-cu12 (or -cu13, your wheel's CUDA), or set NCCL_HOME"
}

# ---- build ----------------------------------------------------------------------------------------------------

# A .deb's files under DIR, without dpkg (the machine may not be Debian): an ar archive holding data.tar.*.
unpack_deb() {  # DEB DIR
  "$PY" - "$1" "$2" <<'PYTHON'
import io, sys, tarfile
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"!<arch>\n", sys.argv[1] + ": not a .deb"
offset = 8
while offset < len(data):
    name, size = data[offset:offset + 16].decode().strip().rstrip("/"), int(data[offset + 48:offset + 58])
    if name.startswith("data.tar"):
        tarfile.open(fileobj=io.BytesIO(data[offset + 60:offset + 60 + size])).extractall(sys.argv[2])
    offset += 60 + size + size % 2
PYTHON
}

# Debian's libhwloc-dev into PREFIX/include and PREFIX/lib/libhwloc.a (its multiarch paths flattened, so that the
# prefix does not depend on the compiler's idea of the multiarch triplet), and nlohmann-json's CMake package.
bundle_prefix() {
  local prefix=$BUILD/bundled unpacked=$BUILD/bundled/unpacked
  if [ ! -f "$prefix/lib/libhwloc.a" ]; then
    rm -rf "$prefix" && mkdir -p "$unpacked" "$prefix/lib"
    local deb
    for deb in "$DEBS"/*.deb; do unpack_deb "$deb" "$unpacked"; done
    cp -r "$unpacked/usr/include" "$prefix/"
    cp -r "$unpacked/usr/include/x86_64-linux-gnu/hwloc/autogen" "$prefix/include/hwloc/"
    cp "$unpacked/usr/lib/x86_64-linux-gnu/libhwloc.a" "$prefix/lib/"
    cp -r "$unpacked/usr/share" "$prefix/"
  fi
  echo "$prefix"
}

# libhwloc.a of bookworm was linked against glibc 2.36's headers: stat and fstatat are functions of glibc since 2.33.
check_glibc_for_bundled_hwloc() {
  local glibc
  glibc=$(getconf GNU_LIBC_VERSION | awk '{print $2}')
  [ "$(printf '%s\n2.33\n' "$glibc" | sort -V | head -1)" = 2.33 ] ||
    die "glibc $glibc is older than 2.33, which the bundled hwloc needs: install your distribution's hwloc development package (hwloc-devel, libhwloc-dev) and pass --hwloc system"
}

torch_cmake_dir() {
  if [ -n "$TORCH_DIR" ]; then
    [ -f "$TORCH_DIR/TorchConfig.cmake" ] || die "--torch-dir $TORCH_DIR has no TorchConfig.cmake"
    echo "$TORCH_DIR"
    return
  fi
  local dir
  dir=$(torch_query 'print(torch.utils.cmake_prefix_path)')/Torch
  [ -f "$dir/TorchConfig.cmake" ] ||
    die "torch $TORCH_VERSION has no $dir/TorchConfig.cmake (Debian's python3-torch ships it in libtorch-dev): pass --torch-dir DIR, e.g. /usr/lib/x86_64-linux-gnu/cmake/Torch"
  echo "$dir"
}

configure_and_build() {
  local torch_dir standard=17 args=() hwloc_used bundled
  torch_dir=$(torch_cmake_dir)
  # LibTorch 2.12 and later need C++20 (runtime/CMakeLists.txt).
  [ "$(printf '%s\n2.12\n' "$TORCH_VERSION" | sort -V | head -1)" != 2.12 ] || standard=20
  bundled=$(bundle_prefix)
  if [ "$HWLOC" = auto ]; then
    HWLOC=bundled
    command -v pkg-config >/dev/null && pkg-config --exists hwloc && HWLOC=system
  fi
  if [ "$HWLOC" = bundled ]; then
    check_glibc_for_bundled_hwloc
    args+=(-DDDP_HWLOC_PREFIX="$bundled")
  else
    args+=(-DDDP_HWLOC_PREFIX=)
  fi
  $CPU || args+=(-DNCCL_INCLUDE_DIR="$NCCL_INCLUDE" -DDDP_NCCL_INCLUDE_DIR="$NCCL_INCLUDE")
  echo "== configure ($BUILD): LibTorch $TORCH_VERSION from $torch_dir, hwloc $HWLOC, C++$standard"
  # The bundled nlohmann-json comes last in the search path: a machine's own copy wins. MPI is left out: the
  # check runs NCCL or Gloo, and an MPI other than OpenMPI 4/5 would stop the configuration.
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_STANDARD=$standard \
    -DDDP_BUILD_PLUGIN=OFF -DBUILD_TESTING=OFF -DDDP_BUILD_DOCTOR=AUTO -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON \
    -DTorch_DIR="$torch_dir" -DCMAKE_PREFIX_PATH="$bundled" "${args[@]}" >"$BUILD/check-configure.log" 2>&1 ||
    { tail -20 "$BUILD/check-configure.log"; die "cmake failed (log: $BUILD/check-configure.log)"; }
  grep -E '^-- (hwloc|runtime|ddp-doctor)' "$BUILD/check-configure.log" || true
  local targets=(ddp-train ddp-topo)
  grep -q '^build ddp-doctor:\|^build src/doctor/ddp-doctor:' "$BUILD/build.ninja" && targets+=(ddp-doctor)
  echo "== build: ${targets[*]} (-j $JOBS)"
  cmake --build "$BUILD" -j "$JOBS" --target "${targets[@]}" >"$BUILD/check-build.log" 2>&1 ||
    { tail -30 "$BUILD/check-build.log"; die "the build failed (log: $BUILD/check-build.log)"; }
  # Which hwloc the build linked, from CMake's cache: the bundled static library, or pkg-config's.
  hwloc_used=$(sed -n 's/^DDP_HWLOC_LIBRARY:FILEPATH=//p' "$BUILD/CMakeCache.txt")
  [ -n "$hwloc_used" ] || hwloc_used=$(sed -n 's/^pkgcfg_lib_HWLOC_hwloc:FILEPATH=//p' "$BUILD/CMakeCache.txt")
  record build pass "LibTorch $TORCH_VERSION; $hwloc_used"
}

# ---- training -------------------------------------------------------------------------------------------------

# RANKS processes of COMMAND with torchrun's variables; each rank's output in WORK/NAME.rankR.log. Returns the
# first failing rank's status.
run_ranks() {  # NAME COMMAND...
  local name=$1 port=$((20000 + RANDOM % 20000)) rank pids=() status=0
  shift
  for ((rank = 0; rank < RANKS; rank++)); do
    env RANK=$rank LOCAL_RANK=$rank WORLD_SIZE="$RANKS" LOCAL_WORLD_SIZE="$RANKS" MASTER_ADDR=127.0.0.1 \
      MASTER_PORT=$port USE_LIBUV=0 OMP_NUM_THREADS=1 "$@" >"$WORK/$name.rank$rank.log" 2>&1 &
    pids+=($!)
  done
  local pid rc
  for pid in "${pids[@]}"; do
    rc=0
    wait "$pid" || rc=$?
    [ $status -ne 0 ] || status=$rc
  done
  return $status
}

samples_per_second() { sed -n 's/^Trained .*: \([0-9]*\) samples\/s$/\1/p' "$WORK/$1.rank0.log"; }

# Maximum absolute difference of two state dicts, and whether they agree within the tolerance.
compare_weights() {  # CPP_OUT PY_OUT RTOL ATOL
  "$PY" - "$@" <<'PYTHON'
import sys, torch
a, b = torch.load(sys.argv[1]), torch.load(sys.argv[2])
rtol, atol = float(sys.argv[3]), float(sys.argv[4])
if sorted(a) != sorted(b):
    print(f"different keys: {sorted(a)} against {sorted(b)}")
    sys.exit(1)
worst = max(float((a[k].double() - b[k].double()).abs().max()) for k in a)
ok = all(torch.allclose(a[k].double(), b[k].double(), rtol=rtol, atol=atol) for k in a)
print(f"max abs diff {worst:.2e}")
sys.exit(0 if ok else 1)
PYTHON
}

# One workload: ddp-train and Python DDP from the same weights on the same data, compared.
train_pair() {  # NAME, ddp-train's arguments, --, model_io.py's arguments
  local name=$1 cpp=() py=() rtol=$RTOL_CPU atol=$ATOL_CPU
  shift
  while [ "$1" != -- ]; do cpp+=("$1"); shift; done
  shift
  py=("$@")
  $CPU || { rtol=$RTOL_GPU atol=$ATOL_GPU; }
  echo "== $name: ddp-train and Python DDP, $RANKS rank(s) on $BACKEND"
  if ! run_ranks "$name-cpp" "$BUILD/runtime/ddp-train" --backend "$BACKEND" --snapshot-dir "$WORK/snapshots-$name" \
    --output "$WORK/$name-cpp.pt" "${cpp[@]}" "$EPOCHS" 0; then
    tail -5 "$WORK/$name-cpp.rank0.log"
    record "$name: ddp-train" FAIL "see $WORK/$name-cpp.rank*.log"
    return
  fi
  if ! run_ranks "$name-py" "$PY" "$MODEL_IO" "${py[@]}" --backend "$BACKEND" --epochs "$EPOCHS"; then
    tail -5 "$WORK/$name-py.rank0.log"
    record "$name: Python DDP" FAIL "see $WORK/$name-py.rank*.log"
    return
  fi
  local cpp_rate py_rate verdict result=pass
  cpp_rate=$(samples_per_second "$name-cpp") py_rate=$(samples_per_second "$name-py")
  grep -h '^\[[CG]PU0\] Epoch 0 ' "$WORK/$name-cpp.rank0.log" || true
  verdict=$(compare_weights "$WORK/$name-cpp.pt" "$WORK/$name-py.pt" "$rtol" "$atol") || result=FAIL
  echo "   samples/s: ddp-train $cpp_rate, Python DDP $py_rate; final weights: $verdict (rtol $rtol, atol $atol)"
  record "$name: weights = Python DDP" "$result" "$verdict (rtol $rtol, atol $atol)"
  record "$name: samples/s" pass "ddp-train $cpp_rate, Python $py_rate"
}

train_all() {
  local batch=32
  train_pair seed --workload seed --samples "$SAMPLES" --batch-size $batch -- \
    train-seed "$WORK/seed-py.pt" --samples "$SAMPLES" --batch-size $batch
  "$PY" "$MODEL_IO" make-model mlp "$WORK/mlp.pt" --width 256
  "$PY" "$MODEL_IO" make-data mlp "$WORK/data.pt" --samples "$SAMPLES"
  train_pair model --model "$WORK/mlp.pt" --data "$WORK/data.pt" --batch-size $batch --momentum 0.9 --lr 0.01 -- \
    train "$WORK/mlp.pt" "$WORK/data.pt" "$WORK/model-py.pt" --batch-size $batch --momentum 0.9 --lr 0.01
}

# ---- topology and doctor --------------------------------------------------------------------------------------

run_topo() {
  echo "== ddp-topo --tasks $RANKS (this machine's topology)"
  if "$BUILD/src/ddp-topo" --tasks "$RANKS" >"$WORK/topo.log" 2>&1; then
    cat "$WORK/topo.log"
    local gpus
    gpus=$(grep -c 'cuda:' "$WORK/topo.log" || true)
    record ddp-topo pass "$RANKS task(s) planned, $gpus line(s) naming a GPU"
  else
    cat "$WORK/topo.log"
    record ddp-topo FAIL "$(tail -1 "$WORK/topo.log")"
  fi
}

# ddp-doctor on this node alone (one rank): its GPU checks (the GPUs of the PCI bus against NVML's, the driver)
# and, where it was built with NCCL, an all-reduce on NCCL. The wheel's NCCL and CUDA runtime are on
# LD_LIBRARY_PATH for its dlopen.
run_doctor() {
  local doctor=$BUILD/src/doctor/ddp-doctor
  if [ ! -x "$doctor" ]; then
    record ddp-doctor skip "not built: no Gloo found (install libgloo-dev); see $BUILD/check-configure.log"
    return
  fi
  local libs status=0
  # The doctor checks the snapshot directory's rules (the user's alone): one made for it.
  mkdir -m 0700 "$WORK/doctor-snapshots"
  libs=$(find "$SITE/nvidia" -maxdepth 2 -name lib -type d 2>/dev/null | tr '\n' ':' || true)
  echo "== ddp-doctor --quick (this node, one rank)"
  env OMP_NUM_THREADS=1 RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=$((20000 + RANDOM % 20000)) \
    DDP_BACKEND="$BACKEND" LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:-}" "$doctor" --quick \
    --snapshot-dir "$WORK/doctor-snapshots" >"$WORK/doctor.log" 2>&1 || status=$?
  cat "$WORK/doctor.log"
  # Its GPU rows (gpu.*, topo.gpu_nic, allreduce.nccl), by the CHECK column of its table, as "check STATUS".
  local gpu_checks
  gpu_checks=$(awk '$3 ~ /^(gpu\.|topo\.gpu|allreduce\.nccl)/ {printf "%s%s %s", sep, $3, $4; sep = ", "}' \
    "$WORK/doctor.log")
  local gpu_result=pass
  case $gpu_checks in *" FAIL"*) gpu_result=FAIL ;; esac
  record "ddp-doctor GPU checks" "$gpu_result" "${gpu_checks:-none reported}"
  if [ $status -eq 0 ]; then
    record ddp-doctor pass "exit 0: $(tail -1 "$WORK/doctor.log" | sed 's/^ddp-doctor: //')"
  else
    record ddp-doctor FAIL "exit $status; see $WORK/doctor.log"
  fi
}

print_table() {
  echo
  printf '%-32s | %-6s | %s\n' check result figure
  printf '%-32s-+-%-6s-+-%s\n' "$(printf '%.0s-' {1..32})" ------ "$(printf '%.0s-' {1..40})"
  local row check result figure
  for row in "${RESULTS[@]}"; do
    IFS='|' read -r check result figure <<<"$row"
    printf '%-32s | %-6s | %s\n' "$check" "$result" "$figure"
  done
}

main() {
  parse_args "$@"
  check_prerequisites
  mkdir -p "$BUILD"
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")
  echo "check.sh: torch $TORCH_VERSION ($PY), $RANKS rank(s) on $BACKEND ($DEVICE), $EPOCHS epochs; work in $WORK"
  if $PREBUILT; then
    [ -x "$BUILD/runtime/ddp-train" ] || die "--prebuilt $BUILD has no runtime/ddp-train: build it first"
    record build skip "--prebuilt $BUILD"
  else
    configure_and_build
  fi
  train_all
  run_topo
  run_doctor
  print_table
  if $FAILED; then
    echo "check.sh: FAILED (logs in $WORK)"
    exit 1
  fi
  rm -rf "$WORK"
  echo "check.sh: all checks passed"
}

main "$@"
