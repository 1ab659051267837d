#!/usr/bin/env bash
# Wall time of `srun --ddp -N2 -n4 true` against plain `srun -N2 -n4 true` on the test cluster, interleaved so that
# both see the same machine load. Goal (foundation issue): under 5% extra. Needs root; brings the cluster up with
# the plugin of BUILD_DIR (default build/) unless one is already up, and tears down only what it started.
#   bench/srun_overhead.sh [BUILD_DIR] [RUNS]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build}
RUNS=${2:-30}
CLUSTER=$ROOT/tests/cluster/cluster.sh

if ! "$CLUSTER" env >/dev/null 2>&1; then
  "$CLUSTER" up --plugin "$BUILD/spank_plugin/ddp.so" >/dev/null
  trap '"$CLUSTER" down >/dev/null' EXIT
fi

elapsed_ms() {  # runs "$@" once on the cluster, prints its wall time in ms
  local start end
  start=$(date +%s%N)
  "$CLUSTER" exec "$@" >/dev/null
  end=$(date +%s%N)
  echo $(((end - start) / 1000000))
}

"$CLUSTER" exec srun --ddp -N2 -n4 true >/dev/null  # warm caches and the plugin's first load
plain=() ddp=()
for ((i = 0; i < RUNS; i++)); do
  plain+=("$(elapsed_ms srun -N2 -n4 true)")
  ddp+=("$(elapsed_ms srun --ddp -N2 -n4 true)")
done

median() { printf '%s\n' "$@" | sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
mean() { printf '%s\n' "$@" | awk '{s += $1} END {printf "%.1f", s / NR}'; }
mp=$(median "${plain[@]}") md=$(median "${ddp[@]}")
printf 'srun_overhead: %d runs each, interleaved, 2 nodes x 2 tasks\n' "$RUNS"
printf 'srun_overhead: plain srun        median %6s ms  mean %6s ms\n' "$mp" "$(mean "${plain[@]}")"
printf 'srun_overhead: srun --ddp        median %6s ms  mean %6s ms\n' "$md" "$(mean "${ddp[@]}")"
awk -v p="$mp" -v d="$md" 'BEGIN {printf "srun_overhead: --ddp / plain     %.3f  (extra %.1f%%, goal < 5%%)\n", d / p, (d / p - 1) * 100}'
