#!/usr/bin/env bash
# A client nobody here wrote: PyTorch's torch.distributed (Debian's python3-torch) does a Gloo all-reduce across
# both nodes, started as `srun --ddp python3 script.py`, with no torchrun.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
[ -n "$DDP_PLUGIN" ] || skip "the plugin is not built"
/usr/bin/python3 -c 'import torch.distributed' 2>/dev/null || skip "Debian's python3-torch is not installed"
script=$(stage "$(dirname "$0")/allreduce.py")

out=$(run_on_cluster timeout 120 srun --ddp -N2 --ntasks-per-node=2 /usr/bin/python3 "$script" 2>&1) ||
  fail "torch.distributed under srun --ddp failed: $out"
for rank in 0 1 2 3; do
  assert_match "$out" "allreduce rank=$rank world=4 local_rank=$((rank % 2)) host=node$((rank / 2 + 1)) sum=10 expected=10 OK" \
    "rank $rank"
done
pass "torch.distributed Gloo all-reduce across 2 nodes x 2 tasks"
