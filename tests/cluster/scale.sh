#!/usr/bin/env bash
# Scale, on a test cluster of its own with DDP_SCALE_NODES nodes (32), brought up once and torn
# down at the end, after the shared 2-node cluster is down (CTest orders it after cluster_down):
# - srun --ddp's contract on every task of a 32-node x 2-task step: each rank's values, one MASTER_ADDR and port;
# - PyTorch's own rendezvous (init_process_group over env://, Gloo) of 32 ranks, one per node, and an all-reduce;
# - ddp-train over 32 ranks to its final model.
set -euo pipefail
NODES=${DDP_SCALE_NODES:-32}
CLUSTER_SH=$(cd "$(dirname "$0")" && pwd)/cluster.sh
[ "$(id -u)" -eq 0 ] || { echo "SKIP scale: needs root: the test cluster runs slurmd in network namespaces"; exit 77; }
[ -n "${DDP_PLUGIN:-}" ] || { echo "SKIP scale: the plugin is not built"; exit 77; }
/usr/bin/python3 -c 'import torch.distributed' 2>/dev/null || { echo "SKIP scale: Debian's python3-torch is not installed"; exit 77; }
[ -x "${DDP_BUILD_DIR:-}/runtime/ddp-train" ] || { echo "SKIP scale: ddp-train is not built (LibTorch not found)"; exit 77; }
trap '"$CLUSTER_SH" down >/dev/null 2>&1' EXIT
"$CLUSTER_SH" up --nodes "$NODES" --plugin "$DDP_PLUGIN"
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck disable=SC2016  # expanded at exit, after lib.sh's own clean-ups
on_exit '"$CLUSTER_SH" down >/dev/null'

# 1. The contract on every task of a step that spans every node, two tasks each.
printer=$(stage "$(dirname "$0")/print_ddp_env.sh")
tasks=$((2 * NODES))
out=$(run_on_cluster timeout 300 srun --ddp -N"$NODES" --ntasks-per-node=2 --cpus-per-task=1 "$printer" | sort -k2,2V)
port=$(sed -n 's/.* RANK=0 .* MASTER_PORT=\([0-9]*\) .*/\1/p' <<<"$out")
run_id=$(sed -n 's/.* RANK=0 .* TORCHELASTIC_RUN_ID=\([0-9.]*\) .*/\1/p' <<<"$out")
expected=""
for ((rank = 0; rank < tasks; rank++)); do
  node=$((rank / 2))
  expected+="node$((node + 1)) RANK=$rank LOCAL_RANK=$((rank % 2)) WORLD_SIZE=$tasks LOCAL_WORLD_SIZE=2 NODE_RANK=$node"
  expected+=" GROUP_RANK=$node GROUP_WORLD_SIZE=$NODES ROLE_NAME=default ROLE_RANK=$rank ROLE_WORLD_SIZE=$tasks"
  expected+=" MASTER_ADDR=node1 MASTER_PORT=$port TORCHELASTIC_RUN_ID=$run_id TORCHELASTIC_RESTART_COUNT=0"
  expected+=" TORCHELASTIC_MAX_RESTARTS=0 TORCHELASTIC_USE_AGENT_STORE=False DDP_BACKEND=auto OMP_NUM_THREADS=1"
  expected+=" USE_LIBUV=0 DDP_SNAPSHOT_DIR=-"$'\n'
done
assert_match "$port" '^[0-9]+$' "one MASTER_PORT"
assert_eq "${expected%$'\n'}" "$out" "the contract on all $tasks tasks of $NODES nodes"

# 2. PyTorch's rendezvous of one rank per node, then an all-reduce over all of them.
script=$(stage "$(dirname "$0")/allreduce.py")
rc=0
out=$(run_on_cluster timeout 600 srun --ddp -N"$NODES" --ntasks-per-node=1 /usr/bin/python3 "$script" 2>&1) || rc=$?
[ "$rc" = 0 ] || fail "the $NODES-rank PyTorch rendezvous failed (exit status $rc): $out"
sum=$((NODES * (NODES + 1) / 2))
assert_eq "$NODES" "$(grep -c "^allreduce rank=[0-9]* world=$NODES local_rank=0 host=node[0-9]* sum=$sum expected=$sum OK$" <<<"$out")" \
  "every rank of the $NODES-rank all-reduce: $out"

# 3. ddp-train over one rank per node, to its final model.
train=$(stage "$DDP_BUILD_DIR/runtime/ddp-train")
out=$(run_on_cluster timeout 600 srun --ddp -N"$NODES" --ntasks-per-node=1 "$train" --snapshot-dir "$TEST_DIR/snapshots" \
  --output "$TEST_DIR/final.pt" 2 1 2>&1) || rc=$?
[ "$rc" = 0 ] || fail "ddp-train over $NODES ranks failed (exit status $rc): $out"
assert_eq "$NODES" "$(grep -c '^\[CPU[0-9]*\] Epoch 1 | Batchsize: 32 | Steps: 2$' <<<"$out")" "every rank trained epoch 1: $out"
assert_contains "$out" "Final model saved at $TEST_DIR/final.pt" "the final model"
assert_match "$out" "Trained 2 epochs \\(4096 samples\\)" "every rank's samples"
pass "the contract on $tasks tasks, a PyTorch rendezvous and ddp-train over $NODES nodes"
