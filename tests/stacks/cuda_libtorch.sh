#!/usr/bin/env bash
# Debian 13's CUDA LibTorch (libtorch-cuda-dev 2.6, contrib) and NCCL's header (libnccl-dev, non-free), unpacked
# into a prefix of their own so that ddp-train's NCCL path is compiled, linked and its CPU tests run in CI, on a
# machine without a GPU. Run inside the trixie root (root.sh run trixie -- ...), after run.sh __install.
#
#   cuda_libtorch.sh fetch    download and unpack them when missing (needs the network; about 1.3 GB once)
#   cuda_libtorch.sh env      print the shell lines that point a build at them (Torch_DIR, CMAKE_PREFIX_PATH);
#                             fails, naming the fix, when fetch has not run. With tests/stacks/cuda_libtorch.cmake
#                             (CMAKE_PROJECT_INCLUDE) the programs built find the libraries through their RPATH.
#
# Nothing is installed: libtorch-cuda-dev conflicts with the libtorch-dev the stack builds against, and its
# dependency nvidia-cudnn downloads cuDNN from NVIDIA when installed. The .debs are fetched with a private apt
# configuration (contrib and non-free added, the root's sources and lists untouched) and dpkg -x'ed. cuDNN is
# replaced by a stub libcudnn.so.9 that defines the symbols libtorch_cuda.so takes from it: enough to link and
# load, never called without a GPU (torch::cuda::is_available() is false first).
#
# The cache: $DDP_CUDA_CACHE (default /var/cache/slurm-ddp/cuda-trixie in the root), complete once .ready holds
# CACHE_VERSION; a cache that an older version of this script made is made again.
set -Eeuo pipefail

readonly CACHE=${DDP_CUDA_CACHE:-/var/cache/slurm-ddp/cuda-trixie}
readonly CACHE_VERSION=1  # raise it when what fetch makes changes
readonly PREFIX=$CACHE/prefix
readonly LIBDIR=$PREFIX/usr/lib/x86_64-linux-gnu
readonly STUB_DIR=$CACHE/cudnn-stub
# What the runtime needs: the CUDA LibTorch with its CMake package, and nccl.h. Their dependencies follow.
readonly WANTED=(libtorch-cuda-dev libnccl-dev)
# Not unpacked: the cuDNN downloader (stubbed), the dev package's own build dependencies (the stack has them), and
# the driver (libcuda1 with its packaging: CUDA's runtime loads it only to reach a GPU, and without it finds none,
# as on a machine without one).
readonly SKIPPED=(nvidia-cudnn python3-dev libprotobuf-dev libcuda1)
# The CUDA runtime's headers (cuda_runtime_api.h, cublas_v2.h, ...), which LibTorch's CUDA headers include, and
# libcu++'s (nv/target, which cuda_fp16.h includes): only their usr/include, not nvidia-cuda-dev's 2.5 GB of
# libraries nor its dependencies.
readonly HEADERS_ONLY=(nvidia-cuda-dev libcu++-dev)

say() { echo "cuda_libtorch.sh: $*" >&2; }
die() { say "error: $*"; exit 1; }

# apt's binary cache stays in the private Dir::Cache: built once, it spares each apt-cache call parsing the lists.
APT_OPTS=(-o "Dir::Etc::SourceList=$CACHE/apt/sources.list" -o Dir::Etc::SourceParts=/nonexistent
  -o "Dir::State::Lists=$CACHE/apt/lists" -o "Dir::Cache=$CACHE/apt/cache")

# The root's Debian sources (debootstrap's one-line sources.list) with contrib and non-free added.
write_sources() {
  mkdir -p "$CACHE/apt/lists/partial" "$CACHE/apt/cache/archives/partial"
  grep -E '^deb[[:space:]]' /etc/apt/sources.list | sed -E 's/[[:space:]]+main([[:space:]]|$).*/ main contrib non-free/' \
    >"$CACHE/apt/sources.list"
  [ -s "$CACHE/apt/sources.list" ] || die "no 'deb' line in the root's /etc/apt/sources.list; recreate the root (root.sh remove trixie)"
}

ready() { [ "$(cat "$CACHE/.ready" 2>/dev/null)" = "$CACHE_VERSION" ]; }

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }
skipped() { local s; for s in "${SKIPPED[@]}"; do [ "$s" != "$1" ] || return 0; done; return 1; }

# The dependency groups of PACKAGE, one line each: its alternatives, with the providers of a virtual name
# (apt-cache depends lists them indented under it).
dependency_groups() {
  apt-cache "${APT_OPTS[@]}" depends --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces \
    --no-enhances "$1" | awk '
      /^ *\|?(Pre)?Depends: / { alt = ($1 ~ /^\|/); name = $2; gsub(/[<>]/, "", name)
                                group = group " " name; if (!alt) { print group; group = "" }; next }
      /^    / { group = group " " $1 }
      END { if (group != "") print group }'
}

# The packages to unpack: WANTED and every dependency the root does not have installed, first alternative first.
closure() {
  local -A chosen=()
  local queue=("${WANTED[@]}") p group alt pick
  while [ ${#queue[@]} -gt 0 ]; do
    p=${queue[0]}
    queue=("${queue[@]:1}")
    [ -z "${chosen[$p]+x}" ] || continue
    chosen[$p]=1
    while read -r group; do
      pick=
      for alt in $group; do
        if installed "$alt" || [ -n "${chosen[$alt]+x}" ] || skipped "$alt"; then pick=; break; fi
        [ -n "$pick" ] || ! apt-cache "${APT_OPTS[@]}" show "$alt" >/dev/null 2>&1 || pick=$alt
      done
      [ -z "$pick" ] || queue+=("$pick")
    done < <(dependency_groups "$p")
  done
  printf '%s\n' "${!chosen[@]}" | sort
}

# A libcudnn.so.9 that defines every cuDNN symbol libtorch_cuda.so needs, under the symbol version it asks for
# (cuDNN's is named libcudnn.so.9), each one failing as cuDNN does when it has no GPU (CUDNN_STATUS_NOT_INITIALIZED).
# libtorch_cuda.so is linked with -z now: a symbol missing here would fail the loading of every program.
make_cudnn_stub() {
  local refs symbols version
  mkdir -p "$STUB_DIR"
  refs=$(nm -D --undefined-only "$LIBDIR/libtorch_cuda.so" | awk '$2 ~ /^cudnn/ {print $2}' | sort -u)
  symbols=$(awk -F@ '{print $1}' <<<"$refs")
  version=$(awk -F@ '{print $2}' <<<"$refs" | sort -u)
  if [ -z "$symbols" ] || [ -z "$version" ] || [ "$(wc -l <<<"$version")" -ne 1 ]; then
    die "libtorch_cuda.so's cuDNN symbols are not as expected (none, or several versions); remove $CACHE and fetch again"
  fi
  {
    echo '/* Generated by tests/stacks/cuda_libtorch.sh: cuDNN stand-in for linking and loading without a GPU. */'
    for s in $symbols; do echo "int $s(void) { return 1; }"; done
  } >"$STUB_DIR/cudnn_stub.c"
  printf '%s { global: *; };\n' "$version" >"$STUB_DIR/cudnn_stub.map"
  cc -shared -fPIC -Wl,-soname,libcudnn.so.9 -Wl,--version-script="$STUB_DIR/cudnn_stub.map" \
    -o "$STUB_DIR/libcudnn.so.9" "$STUB_DIR/cudnn_stub.c"
  say "stub libcudnn.so.9 with $(wc -w <<<"$symbols") symbols of version $version in $STUB_DIR"
}

cmd_fetch() {
  local t0=$SECONDS packages deb
  mkdir -p "$CACHE"
  exec 9>"$CACHE/.lock"
  flock -w 1800 9 || die "another cuda_libtorch.sh holds $CACHE/.lock for over 30 minutes"
  ! ready || return 0
  command -v nm >/dev/null || die "needs nm and cc: run ./run.sh __install in the root first"
  command -v cc >/dev/null || die "needs nm and cc: run ./run.sh __install in the root first"
  rm -rf "$PREFIX" "$STUB_DIR" "$CACHE/debs" "$CACHE/headers"
  write_sources
  apt-get "${APT_OPTS[@]}" update -qq || die "apt-get update with contrib and non-free failed (network, or the mirror)"
  mapfile -t packages < <(closure)
  say "downloading ${#packages[@]} packages and the headers of ${HEADERS_ONLY[*]}: ${packages[*]}"
  mkdir -p "$CACHE/debs" "$CACHE/headers"
  # As root, not as _apt: the cache is root's.
  (cd "$CACHE/debs" && apt-get "${APT_OPTS[@]}" -o APT::Sandbox::User=root download -qq "${packages[@]}") ||
    die "apt-get download failed (network, or the mirror)"
  (cd "$CACHE/headers" && apt-get "${APT_OPTS[@]}" -o APT::Sandbox::User=root download -qq "${HEADERS_ONLY[@]}") ||
    die "apt-get download ${HEADERS_ONLY[*]} failed (network, or the mirror)"
  for deb in "$CACHE"/debs/*.deb; do dpkg -x "$deb" "$PREFIX"; done
  for deb in "$CACHE"/headers/*.deb; do
    dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$PREFIX" --wildcards './usr/include/*' ||
      die "cannot unpack the headers of $deb"
  done
  # The .debs are kept out of the cache once unpacked, and so are NCCL's static libraries (100 MB, never linked).
  rm -rf "$CACHE/debs" "$CACHE/headers" "$CACHE/apt/cache/archives" "$LIBDIR"/libnccl_static.a
  make_cudnn_stub
  echo "$CACHE_VERSION" >"$CACHE/.ready"
  say "CUDA LibTorch ready in $PREFIX in $((SECONDS - t0)) s"
}

# Debian's TorchConfig.cmake finds its own directory relative to itself, but Caffe2's package and its libraries with
# find_package/find_library PATHS, which come after the system's: there the CPU LibTorch of libtorch-dev would win.
# CMAKE_PREFIX_PATH comes first, for those and for nccl.h.
cmd_env() {
  ready || die "no CUDA LibTorch of this version in $CACHE: run tests/stacks/cuda_libtorch.sh fetch (in the trixie root)"
  echo "export Torch_DIR=$LIBDIR/cmake/Torch"
  echo "export CMAKE_PREFIX_PATH=$PREFIX/usr"
}

case ${1:-} in
  fetch) cmd_fetch ;;
  env) cmd_env ;;
  *) die "usage: cuda_libtorch.sh fetch|env (see the header of $0)" ;;
esac
