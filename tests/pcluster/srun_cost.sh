#!/usr/bin/env bash
# What --ddp costs an srun on Slurm 25.11: 2-node steps of `true`, plain and with --ddp, alternating, side by side in
# one run. Prints the medians and their ratio (a figure, not a verdict: the only check is that every step succeeded).
set -euo pipefail
# shellcheck source=../cluster/lib.sh
source "$(dirname "$0")/../cluster/lib.sh"
ROUNDS=${ROUNDS:-21}
plain=() ddp=()
elapsed_since() { awk -v t="$1" -v n="$EPOCHREALTIME" 'BEGIN {printf "%.4f", n - t}'; }
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
for _ in $(seq "$ROUNDS"); do
  t=$EPOCHREALTIME; run_on_cluster srun -N2 -n2 true || fail "plain srun failed"; plain+=("$(elapsed_since "$t")")
  t=$EPOCHREALTIME; run_on_cluster srun --ddp -N2 -n2 true || fail "srun --ddp failed"; ddp+=("$(elapsed_since "$t")")
done
figure=$(awk -v p="$(median "${plain[@]}")" -v d="$(median "${ddp[@]}")" -v n="$ROUNDS" \
  'BEGIN {printf "srun --ddp %.1f ms / plain srun %.1f ms = %.3f (medians of %d 2-node steps each)", d * 1000, p * 1000, d / p, n}')
echo "FIGURE $figure on Slurm $(srun --version | awk '{print $2}')"
pass "$figure"
