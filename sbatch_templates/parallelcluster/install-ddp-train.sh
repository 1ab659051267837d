#!/usr/bin/env bash
# Builds ddp-train against the LibTorch of a Python that has PyTorch (pip or conda: torch.utils.cmake_prefix_path;
# Debian's python3-torch: libtorch-dev's CMake package) and installs it where every node runs the same one:
#
#   sudo ./install-ddp-train.sh --python /shared/conda/bin/python [--prefix /opt/slurm-ddp] [--torch-dir DIR]
#
# ddp-train goes to PREFIX/bin (default /opt/slurm-ddp/bin: on ParallelCluster, a SharedStorage mount every compute
# node sees; docs/admin.md). It finds its LibTorch through its RPATH, so the Python environment must be at the same
# path on every node (shared storage, or the same AMI). It is replaced as ddp.so is: renamed over the old one, which
# keeps a name for the ranks still running it.
# Options:
#   --python PY       the Python whose torch to build against (required)
#   --prefix DIR      where bin/ddp-train goes (default /opt/slurm-ddp)
#   --torch-dir DIR   the directory of TorchConfig.cmake, when PY's torch has none of its own
#   --build-dir DIR   build directory (default: a fresh temporary directory, removed at the end)
#   --check           check what the build needs and say what is missing; build and write nothing
# It needs CMake 3.18 or later (LibTorch's package is a CMake one), a C++17 compiler and zlib's headers; what is
# missing is named first, one line each with this system's command that installs it. Running it twice changes nothing.
set -euo pipefail

SOURCE=$(cd "$(dirname "$0")/../.." && pwd)
PROGRAM=install-ddp-train
# shellcheck source=install_lib.sh
source "$(dirname "$0")/install_lib.sh"
python="" dest=/opt/slurm-ddp torch_dir="" build_dir="" check_only=false

while [ $# -gt 0 ]; do
  case $1 in
    --python) python=${2:?--python needs the path of a Python}; shift 2 ;;
    --prefix) dest=${2:?--prefix needs a directory}; shift 2 ;;
    --torch-dir) torch_dir=${2:?--torch-dir needs a directory}; shift 2 ;;
    --build-dir) build_dir=${2:?--build-dir needs a directory}; shift 2 ;;
    --check) check_only=true; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1'; see --help" ;;
  esac
done
[ -n "$python" ] || die "give the Python that has PyTorch with --python PATH (e.g. /shared/conda/bin/python)"

torch_query() { "$python" -c "import torch; $1" 2>/dev/null; }

# TorchConfig.cmake of PY's torch: given, the wheel's own (torch.utils.cmake_prefix_path), or, for a
# distribution's torch, the CMake package its LibTorch development package installs beside it.
find_torch_dir() {
  if [ -n "$torch_dir" ]; then
    [ -f "$torch_dir/TorchConfig.cmake" ] || die "--torch-dir $torch_dir has no TorchConfig.cmake"
    return 0
  fi
  local candidate multiarch
  multiarch=$(gcc -print-multiarch 2>/dev/null || true)
  for candidate in "$(torch_query 'print(torch.utils.cmake_prefix_path)')/Torch" \
    ${multiarch:+/usr/lib/$multiarch/cmake/Torch} /usr/lib64/cmake/Torch; do
    [ -f "$candidate/TorchConfig.cmake" ] && { torch_dir=$candidate; return 0; }
  done
  die "torch $torch_version of $python has no TorchConfig.cmake (pip and conda wheels have one; Debian's python3-torch needs libtorch-dev): install it, or give its directory with --torch-dir"
}

check_prerequisites() {
  command -v "$python" >/dev/null || die "no Python '$python': give the path of the Python that has PyTorch with --python"
  torch_query 'pass' ||
    die "$python cannot import torch: install PyTorch into it ($python -m pip install torch) or give another Python with --python; nothing was built"
  torch_version=$(torch_query 'print(torch.__version__.split("+")[0])')
  local lines=() cmake_version
  if command -v cmake >/dev/null; then
    cmake_version=$(cmake --version | awk 'NR == 1 {print $3}')
    [ "$(printf '%s\n3.18\n' "$cmake_version" | sort -V | head -n 1)" = 3.18 ] ||
      lines+=("missing: CMake 3.18 or later (found $cmake_version): $(install_command cmake), or $python -m pip install cmake")
  else
    lines+=("missing: cmake (LibTorch's package is a CMake one): $(install_command cmake), or $python -m pip install cmake")
  fi
  command -v "${CXX:-g++}" >/dev/null || lines+=("missing: a C++17 compiler: $(install_command cxx)")
  printf '#include <zlib.h>\n' | "${CXX:-g++}" -x c++ -E - >/dev/null 2>&1 || lines+=("missing: zlib's headers: $(install_command zlib)")
  printf '#include <hwloc.h>\n' | "${CXX:-g++}" -x c++ -E - >/dev/null 2>&1 || lines+=("missing: the hwloc 2 headers: $(install_command hwloc)")
  if [ ${#lines[@]} -gt 0 ]; then
    printf '%s: %s\n' "$PROGRAM" "${lines[@]}" >&2
    die "ddp-train was not built; install what is named above and run again"
  fi
  find_torch_dir
  # LibTorch's c10d headers include Gloo's: a pip or conda wheel has them in torch/include, a distribution's
  # LibTorch may have them in a package of their own (Debian: libgloo-dev).
  local torch_prefix
  torch_prefix=$(cd "$torch_dir/../../.." && pwd)
  if [ ! -f "$torch_prefix/include/gloo/rendezvous/store.h" ] && [ ! -f /usr/include/gloo/rendezvous/store.h ]; then
    die "LibTorch $torch_version ($torch_dir) has no Gloo headers (gloo/rendezvous/store.h), which its c10d headers include: install them (Debian and Ubuntu: apt-get install -y libgloo-dev), or use a pip or conda PyTorch; nothing was built"
  fi
}

# Keyed by what the binary is built from: the source tree, and the LibTorch it links.
build_key() {
  echo "torch $torch_version $torch_dir source $(cd "$SOURCE" && find src include runtime CMakeLists.txt cmake -type f -print0 |
    LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)"
}

build() {
  if [ -z "$build_dir" ]; then
    build_dir=$(mktemp -d /tmp/slurm-ddp-train.XXXXXX)
    trap 'rm -rf "$build_dir"' EXIT
  fi
  local standard=17 json=() log
  # LibTorch 2.12 and later need C++20 (runtime/CMakeLists.txt).
  [ "$(printf '%s\n2.12\n' "$torch_version" | sort -V | head -n 1)" != 2.12 ] || standard=20
  # nlohmann-json's header from the source tree where the system has none (third_party/debs).
  if [ ! -f /usr/include/nlohmann/json.hpp ] && [ ! -f /usr/local/include/nlohmann/json.hpp ]; then
    mkdir -p "$build_dir/bundled"
    (cd "$build_dir/bundled" && ar p "$SOURCE"/third_party/debs/nlohmann-json3-dev_*.deb data.tar.xz | tar -xJf - ./usr)
    json=(-DCMAKE_PREFIX_PATH="$build_dir/bundled/usr")
  fi
  say "building ddp-train against LibTorch $torch_version ($torch_dir), C++$standard"
  # MPI and ddp-doctor stay out: the Gloo and NCCL backends are what ddp-train uses under srun --ddp here.
  log=$(cmake -S "$SOURCE" -B "$build_dir/tree" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_STANDARD=$standard \
    -DDDP_BUILD_PLUGIN=OFF -DBUILD_TESTING=OFF -DDDP_BUILD_DOCTOR=OFF -DDDP_UNITY_BUILD=ON \
    -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON -DTorch_DIR="$torch_dir" "${json[@]}" 2>&1) ||
    { tail -n 20 <<<"$log" >&2; die "configuring ddp-train failed (above); nothing was installed"; }
  log=$(cmake --build "$build_dir/tree" --target ddp-train -j "$(nproc)" 2>&1) ||
    { tail -n 30 <<<"$log" >&2; die "building ddp-train failed (above); nothing was installed"; }
  built=$build_dir/tree/runtime/ddp-train
  "$built" --help >/dev/null 2>&1 || die "the ddp-train built does not start: $("$built" --help 2>&1 | head -n 1)"
}

check_prerequisites
if $check_only; then
  say "ready to build ddp-train against LibTorch $torch_version ($torch_dir) into $dest/bin"
  exit 0
fi
key=$(build_key)
if [ -x "$dest/bin/ddp-train" ] && [ "$(cat "$dest/bin/.ddp-train.built" 2>/dev/null)" = "$key" ]; then
  say "unchanged: $dest/bin/ddp-train (built from this source against LibTorch $torch_version)"
  exit 0
fi
build
mkdir -p "$dest/bin"
install_shared_file "$built" "$dest/bin/ddp-train" 0755
echo "$key" >"$dest/bin/.ddp-train.built"
