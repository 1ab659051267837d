#!/usr/bin/env bash
# What --ddp costs an srun on Slurm 25.11: 2-node steps of `true`, plain and with --ddp, alternating, side by side in
# one run. Prints the ratio (a figure, not a verdict: the only check is that every step succeeded).
set -euo pipefail
# shellcheck source=../cluster/lib.sh
source "$(dirname "$0")/../cluster/lib.sh"
ROUNDS=${ROUNDS:-15}
plain=0 ddp=0
for _ in $(seq "$ROUNDS"); do
  t=$EPOCHREALTIME; run_on_cluster srun -N2 -n2 true || fail "plain srun failed"
  plain=$(awk -v a="$plain" -v t="$t" -v n="$EPOCHREALTIME" 'BEGIN {print a + n - t}')
  t=$EPOCHREALTIME; run_on_cluster srun --ddp -N2 -n2 true || fail "srun --ddp failed"
  ddp=$(awk -v a="$ddp" -v t="$t" -v n="$EPOCHREALTIME" 'BEGIN {print a + n - t}')
done
figure=$(awk -v p="$plain" -v d="$ddp" -v n="$ROUNDS" 'BEGIN {printf "srun --ddp %.3f s / plain srun %.3f s = %.2f (mean of %d 2-node steps each)", d / n, p / n, d / p, n}')
echo "FIGURE $figure on Slurm $(srun --version | awk '{print $2}')"
pass "$figure"
