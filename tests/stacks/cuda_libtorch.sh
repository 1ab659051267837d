#!/usr/bin/env bash
# Debian 13's CUDA LibTorch (libtorch-cuda-dev 2.6, contrib) and NCCL's header (libnccl-dev, non-free), unpacked
# into a prefix of their own so that ddp-train's NCCL path is compiled, linked and its CPU tests run in CI, on a
# machine without a GPU. Run inside the trixie root (root.sh run trixie -- ...), after run.sh __install.
#
#   cuda_libtorch.sh fetch    download and unpack them when missing (needs the network; about 1.3 GB once)
#   cuda_libtorch.sh env      print the shell lines that point a build at them (Torch_DIR, NCCL_HOME,
#                             LD_LIBRARY_PATH); fails, naming the fix, when fetch has not run
#
# Nothing is installed: libtorch-cuda-dev conflicts with the libtorch-dev the stack builds against, and its
# dependency nvidia-cudnn downloads cuDNN from NVIDIA when installed. The .debs are fetched with a private apt
# configuration (contrib and non-free added, the root's sources and lists untouched) and dpkg -x'ed. cuDNN is
# replaced by a stub libcudnn.so.9 that defines the symbols libtorch_cuda.so takes from it: enough to link and
# load, never called without a GPU (torch::cuda::is_available() is false first).
#
# The cache: $DDP_CUDA_CACHE (default /var/cache/slurm-ddp/cuda-trixie in the root), complete once .ready exists.
set -Eeuo pipefail

readonly CACHE=${DDP_CUDA_CACHE:-/var/cache/slurm-ddp/cuda-trixie}
readonly PREFIX=$CACHE/prefix
readonly LIBDIR=$PREFIX/usr/lib/x86_64-linux-gnu
readonly STUB_DIR=$CACHE/cudnn-stub
# What the runtime needs: the CUDA LibTorch with its CMake package, and nccl.h. Their dependencies follow.
readonly WANTED=(libtorch-cuda-dev libnccl-dev)
# Not unpacked: the cuDNN downloader (stubbed), the dev package's own build dependencies (the stack has them), and
# the driver (libcuda1 with its packaging: CUDA's runtime loads it only to reach a GPU, and without it finds none,
# as on a machine without one).
readonly SKIPPED=(nvidia-cudnn python3-dev libprotobuf-dev libcuda1)
# The CUDA runtime's headers (cuda_runtime_api.h, cublas_v2.h, ...), which LibTorch's CUDA headers include: only
# usr/include of it, not its 2.5 GB of libraries nor its dependencies.
readonly HEADERS_ONLY=nvidia-cuda-dev

say() { echo "cuda_libtorch.sh: $*" >&2; }
die() { say "error: $*"; exit 1; }

APT_OPTS=(-o "Dir::Etc::SourceList=$CACHE/apt/sources.list" -o Dir::Etc::SourceParts=/nonexistent
  -o "Dir::State::Lists=$CACHE/apt/lists" -o "Dir::Cache=$CACHE/apt/cache" -o Dir::Cache::pkgcache=
  -o Dir::Cache::srcpkgcache= -o APT::Get::AllowUnauthenticated=false)

# The root's Debian sources (debootstrap's one-line sources.list) with contrib and non-free added.
write_sources() {
  mkdir -p "$CACHE/apt/lists/partial" "$CACHE/apt/cache/archives/partial"
  grep -E '^deb[[:space:]]' /etc/apt/sources.list | sed -E 's/[[:space:]]+main([[:space:]]|$).*/ main contrib non-free/' \
    >"$CACHE/apt/sources.list"
  [ -s "$CACHE/apt/sources.list" ] || die "no 'deb' line in the root's /etc/apt/sources.list; recreate the root (root.sh remove trixie)"
}

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

# A libcudnn.so.9 that defines every cuDNN symbol libtorch_cuda.so needs, each one failing as cuDNN does when it
# has no GPU (CUDNN_STATUS_NOT_INITIALIZED). Only for linking and loading without a GPU.
make_cudnn_stub() {
  local symbols
  mkdir -p "$STUB_DIR"
  symbols=$(nm -D --undefined-only "$LIBDIR"/libtorch_cuda.so* 2>/dev/null | awk '$2 ~ /^cudnn/ {sub(/@.*/, "", $2); print $2}' | sort -u)
  [ -n "$symbols" ] || die "no cuDNN symbol in $LIBDIR/libtorch_cuda.so: has the package changed? remove $CACHE and fetch again"
  {
    echo '/* Generated by tests/stacks/cuda_libtorch.sh: cuDNN stand-in for linking and loading without a GPU. */'
    for s in $symbols; do echo "int $s(void) { return 1; }"; done
  } >"$STUB_DIR/cudnn_stub.c"
  cc -shared -fPIC -Wl,-soname,libcudnn.so.9 -o "$STUB_DIR/libcudnn.so.9" "$STUB_DIR/cudnn_stub.c"
  say "stub libcudnn.so.9 with $(wc -w <<<"$symbols") symbols in $STUB_DIR"
}

cmd_fetch() {
  local t0=$SECONDS packages deb
  mkdir -p "$CACHE"
  exec 9>"$CACHE/.lock"
  flock -w 1800 9 || die "another cuda_libtorch.sh holds $CACHE/.lock for over 30 minutes"
  [ ! -e "$CACHE/.ready" ] || return 0
  command -v nm >/dev/null || die "needs nm and cc: run ./run.sh __install in the root first"
  command -v cc >/dev/null || die "needs nm and cc: run ./run.sh __install in the root first"
  rm -rf "$PREFIX" "$STUB_DIR" "$CACHE/debs" "$CACHE/headers"
  write_sources
  apt-get "${APT_OPTS[@]}" update -qq || die "apt-get update with contrib and non-free failed (network, or the mirror)"
  mapfile -t packages < <(closure)
  say "downloading ${#packages[@]} packages and the headers of $HEADERS_ONLY: ${packages[*]}"
  mkdir -p "$CACHE/debs" "$CACHE/headers"
  # As root, not as _apt: the cache is root's.
  (cd "$CACHE/debs" && apt-get "${APT_OPTS[@]}" -o APT::Sandbox::User=root download -qq "${packages[@]}") ||
    die "apt-get download failed (network, or the mirror)"
  (cd "$CACHE/headers" && apt-get "${APT_OPTS[@]}" -o APT::Sandbox::User=root download -qq "$HEADERS_ONLY") ||
    die "apt-get download $HEADERS_ONLY failed (network, or the mirror)"
  for deb in "$CACHE"/debs/*.deb; do dpkg -x "$deb" "$PREFIX"; done
  dpkg-deb --fsys-tarfile "$CACHE"/headers/*.deb | tar -x -C "$PREFIX" --wildcards './usr/include/*' ||
    die "cannot unpack the headers of $HEADERS_ONLY"
  # The .debs are kept out of the cache once unpacked, and so are NCCL's static libraries (100 MB, never linked).
  rm -rf "$CACHE/debs" "$CACHE/headers" "$CACHE/apt/cache/archives" "$LIBDIR"/libnccl_static.a
  make_cudnn_stub
  touch "$CACHE/.ready"
  say "CUDA LibTorch ready in $PREFIX in $((SECONDS - t0)) s"
}

# Debian's TorchConfig.cmake finds its files relative to itself, so the unpacked copy is used in place.
cmd_env() {
  [ -e "$CACHE/.ready" ] || die "no CUDA LibTorch in $CACHE: run tests/stacks/cuda_libtorch.sh fetch (in the trixie root)"
  echo "export Torch_DIR=$LIBDIR/cmake/Torch"
  echo "export NCCL_HOME=$PREFIX/usr"
  # libgloo_cuda.so.0 is in usr/lib; the stub goes last, after any real cuDNN the prefix could hold.
  echo "export LD_LIBRARY_PATH=$LIBDIR:$PREFIX/usr/lib:$STUB_DIR"
}

case ${1:-} in
  fetch) cmd_fetch ;;
  env) cmd_env ;;
  *) die "usage: cuda_libtorch.sh fetch|env (see the header of $0)" ;;
esac
