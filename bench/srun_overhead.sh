#!/usr/bin/env bash
# Wall time of `srun --ddp -N NODES --ntasks-per-node=2 true` against the same plain srun on the test cluster,
# interleaved so that both see the same machine load. Goal: under 5% extra. Needs root; brings a cluster of NODES
# nodes up with the plugin of BUILD_DIR (default build/) unless one of that size is already up, and tears down only
# what it started. Inside a Debian 13 root: tests/stacks/root.sh run trixie --isolated -- bench/srun_overhead.sh build-debian13
#   bench/srun_overhead.sh [BUILD_DIR] [RUNS] [NODES]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(realpath "${1:-$ROOT/build}")
RUNS=${2:-30}
NODES=${3:-2}
CLUSTER=$ROOT/tests/cluster/cluster.sh

if up=$("$CLUSTER" env 2>/dev/null); then
  eval "$up"
  [ "$DDP_CLUSTER_NNODES" = "$NODES" ] ||
    { echo "srun_overhead: a cluster of $DDP_CLUSTER_NNODES nodes is up; take it down or ask for $DDP_CLUSTER_NNODES nodes" >&2; exit 2; }
else
  "$CLUSTER" up --nodes "$NODES" --plugin "$BUILD/spank_plugin/ddp.so" >/dev/null
  trap '"$CLUSTER" down >/dev/null' EXIT
fi

elapsed_ms() {  # runs "$@" once on the cluster, prints its wall time in ms
  local start end
  start=$(date +%s%N)
  "$CLUSTER" exec "$@" >/dev/null
  end=$(date +%s%N)
  echo $(((end - start) / 1000000))
}

step=(-N "$NODES" --ntasks-per-node=2 true)
"$CLUSTER" exec srun --ddp "${step[@]}" >/dev/null  # warm caches and the plugin's first load
plain=() ddp=()
for ((i = 0; i < RUNS; i++)); do
  plain+=("$(elapsed_ms srun "${step[@]}")")
  ddp+=("$(elapsed_ms srun --ddp "${step[@]}")")
done

median() { printf '%s\n' "$@" | sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
mean() { printf '%s\n' "$@" | awk '{s += $1} END {printf "%.1f", s / NR}'; }
mp=$(median "${plain[@]}") md=$(median "${ddp[@]}")
printf 'srun_overhead: %s, %d runs each, interleaved, %d nodes x 2 tasks\n' "$("$CLUSTER" exec srun --version)" "$RUNS" "$NODES"
printf 'srun_overhead: plain srun        median %6s ms  mean %6s ms\n' "$mp" "$(mean "${plain[@]}")"
printf 'srun_overhead: srun --ddp        median %6s ms  mean %6s ms\n' "$md" "$(mean "${ddp[@]}")"
awk -v p="$mp" -v d="$md" 'BEGIN {printf "srun_overhead: --ddp / plain     %.3f  (extra %.1f%%, goal < 5%%)\n", d / p, (d / p - 1) * 100}'
