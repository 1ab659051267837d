#!/usr/bin/env bash
# srun --ddp against plain srun (bench/srun_overhead.sh, 2 tasks per node) and the rendezvous time of PyTorch's
# init_process_group (bench/rendezvous_time.py, one rank per node) for test clusters of several sizes, one table.
# Needs root; brings each cluster up with the plugin of BUILD_DIR and down again, so no other cluster may be up.
# Inside a Debian 13 root: tests/stacks/root.sh run trixie --isolated -- bench/scale_bench.sh build-debian13
#   bench/scale_bench.sh [BUILD_DIR] [NODE COUNTS (default "2 8 32 64")] [srun RUNS (10)] [rendezvous RUNS (3)]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(realpath "${1:-$ROOT/build}")
SIZES=${2:-2 8 32 64}
RUNS=${3:-10}
RENDEZVOUS_RUNS=${4:-3}
CLUSTER=$ROOT/tests/cluster/cluster.sh
"$CLUSTER" env >/dev/null 2>&1 && { echo "scale_bench: a test cluster is up; take it down first" >&2; exit 2; }
trap '"$CLUSTER" down >/dev/null 2>&1' EXIT

median() { printf '%s\n' "$@" | sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

rows=() slurm=""
for nodes in $SIZES; do
  "$CLUSTER" up --nodes "$nodes" --plugin "$BUILD/spank_plugin/ddp.so" >/dev/null
  eval "$("$CLUSTER" env)"
  slurm=$("$CLUSTER" exec srun --version)
  overhead=$("$ROOT/bench/srun_overhead.sh" "$BUILD" "$RUNS" "$nodes")
  echo "$overhead"
  script=$DDP_CLUSTER_SHARED/rendezvous_time.py
  install -m 0644 "$ROOT/bench/rendezvous_time.py" "$script"
  seconds=()
  for ((i = 0; i < RENDEZVOUS_RUNS; i++)); do
    line=$("$CLUSTER" exec --cwd "$DDP_CLUSTER_SHARED" srun --ddp -N "$nodes" --ntasks-per-node=1 /usr/bin/python3 "$script" |
      grep '^rendezvous ')
    echo "scale_bench: $nodes nodes: $line"
    seconds+=("${line##*seconds=}")
  done
  plain=$(sed -n 's/.*plain srun *median *\([0-9.]*\) ms.*/\1/p' <<<"$overhead")
  ddp=$(sed -n 's/.*srun --ddp *median *\([0-9.]*\) ms.*/\1/p' <<<"$overhead")
  ratio=$(sed -n 's/.*--ddp \/ plain *\([0-9.]*\).*/\1/p' <<<"$overhead")
  rows+=("$(printf '| %5d | %5d | %8s ms | %8s ms | %6s | %7s s |' "$nodes" $((2 * nodes)) "$plain" "$ddp" "$ratio" \
    "$(median "${seconds[@]}")")")
  "$CLUSTER" down >/dev/null
done
echo "scale_bench: $slurm, $(/usr/bin/python3 -c 'import torch; print("torch", torch.__version__)'), $(nproc) cores"
echo "| nodes | tasks | plain srun  | srun --ddp  | ratio  | rendezvous (median of $RENDEZVOUS_RUNS, 1 rank/node) |"
echo "|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
