#!/usr/bin/env bash
# Wall time of `srun --ddp` in a container against the same srun without --ddp, on the test cluster, for each
# container runtime there is: ch-run with the cluster's image (srun ... ch-run IMAGE -- true), Slurm's OCI containers
# (srun --container=BUNDLE true, rootless runc) and the pyxis stand-in listed before ddp.so (srun
# --container-image=pytorch true). Runs are interleaved (plain, --ddp, plain, ...) so that both see the same load.
# Needs root; brings a cluster of NODES nodes up with the plugin of BUILD_DIR (default build/) unless one of that
# size is up, and tears down only what it started. Inside a Debian root:
#   tests/stacks/root.sh run trixie --isolated -- bench/container_overhead.sh build-debian13
#   bench/container_overhead.sh [BUILD_DIR] [RUNS] [NODES]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(realpath "${1:-$ROOT/build}")
RUNS=${2:-20}
NODES=${3:-2}
CLUSTER=$ROOT/tests/cluster/cluster.sh

if up=$("$CLUSTER" env 2>/dev/null); then
  eval "$up"
  [ "$DDP_CLUSTER_NNODES" = "$NODES" ] ||
    { echo "container_overhead: a cluster of $DDP_CLUSTER_NNODES nodes is up; take it down or ask for $DDP_CLUSTER_NNODES nodes" >&2; exit 2; }
  cleanup=()
else
  "$CLUSTER" up --nodes "$NODES" --plugin "$BUILD/spank_plugin/ddp.so" >/dev/null
  eval "$("$CLUSTER" env)"
  cleanup=("$CLUSTER" down)
fi
work=$(mktemp -d "$DDP_CLUSTER_SHARED/container-overhead.XXXXXX")
chown "$DDP_CLUSTER_USER" "$work"
plugstack=$(cat "$DDP_CLUSTER_PLUGSTACK")
uid=$(id -u "$DDP_CLUSTER_USER")
finish() {
  printf '%s\n' "$plugstack" >"$DDP_CLUSTER_PLUGSTACK"
  rm -rf "$work" "$DDP_CLUSTER_DIR/etc/oci.conf" "$DDP_CLUSTER_BUNDLE/config.json" "/run/user/$uid"
  [ ${#cleanup[@]} -eq 0 ] || "${cleanup[@]}" >/dev/null
}
trap finish EXIT

elapsed_ms() {  # runs "$@" once on the cluster, prints its wall time in ms
  local start end
  start=$(date +%s%N)
  "$CLUSTER" exec --cwd "$work" "$@" >/dev/null
  end=$(date +%s%N)
  echo $(((end - start) / 1000000))
}

median() { printf '%s\n' "$@" | sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

# compare NAME SRUN-OPTIONS... -- COMMAND...: RUNS interleaved pairs, plain and with --ddp.
compare() {
  local name=$1 opts=() plain=() ddp=() i mp md
  shift
  while [ "$1" != -- ]; do opts+=("$1"); shift; done
  shift
  local step=(-N "$NODES" --ntasks-per-node=2 "${opts[@]}")
  "$CLUSTER" exec --cwd "$work" srun --ddp "${step[@]}" "$@" >/dev/null || { echo "container_overhead: $name: srun --ddp failed" >&2; return 1; }
  for ((i = 0; i < RUNS; i++)); do
    plain+=("$(elapsed_ms srun "${step[@]}" "$@")")
    ddp+=("$(elapsed_ms srun --ddp "${step[@]}" "$@")")
  done
  mp=$(median "${plain[@]}") md=$(median "${ddp[@]}")
  printf 'container_overhead: %-34s plain %7s ms  --ddp %7s ms  (median of %d)  --ddp / plain %s\n' "$name" "$mp" "$md" \
    "$RUNS" "$(awk -v p="$mp" -v d="$md" 'BEGIN {printf "%.3f", d / p}')"
}

echo "container_overhead: $("$CLUSTER" exec srun --version), $NODES nodes x 2 tasks"
compare "no container (srun true)" -- true
if command -v ch-run >/dev/null; then
  compare "ch-run (srun ch-run IMAGE -- true)" -- ch-run "$DDP_CLUSTER_IMAGE" -- true
fi
if command -v runc >/dev/null; then
  "$ROOT/tests/cluster/oci_bundle.sh" "$DDP_CLUSTER_DIR/etc" "$DDP_CLUSTER_BUNDLE" "$DDP_CLUSTER_SHARED" \
    "$DDP_CLUSTER_USER"
  compare "OCI (srun --container=BUNDLE true)" --container="$DDP_CLUSTER_BUNDLE" -- true
fi
standin=$BUILD/tests/cluster/pyxis_standin.so
if [ -e "$standin" ]; then
  install -m 0755 "$standin" "$work/pyxis_standin.so"
  install -d -o "$DDP_CLUSTER_USER" -m 0700 "$DDP_CLUSTER_SHARED/ddp-logs"  # the failure reports, mounted in too
  printf '%s\n' "required $work/pyxis_standin.so" "$plugstack" >"$DDP_CLUSTER_PLUGSTACK"
  compare "pyxis stand-in (--container-image)" --container-image=pytorch \
    --container-mounts="$work,$DDP_CLUSTER_SHARED/ddp-logs" -- true
fi
