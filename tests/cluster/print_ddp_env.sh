#!/bin/sh
# One line per task: its host, then the torchrun contract variables as NAME=value ("-" when unset).
line="$(hostname)"
for name in RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE NODE_RANK GROUP_RANK GROUP_WORLD_SIZE ROLE_NAME ROLE_RANK \
            ROLE_WORLD_SIZE MASTER_ADDR MASTER_PORT TORCHELASTIC_RUN_ID TORCHELASTIC_RESTART_COUNT \
            TORCHELASTIC_MAX_RESTARTS TORCHELASTIC_USE_AGENT_STORE DDP_BACKEND OMP_NUM_THREADS USE_LIBUV DDP_SNAPSHOT_DIR; do
  eval "value=\${$name-}"
  line="$line $name=${value:--}"
done
echo "$line"
