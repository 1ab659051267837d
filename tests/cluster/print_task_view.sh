#!/bin/sh
# One line per task, as the program sees things inside whatever container it runs in: the contract's values, the
# CPUs it may run on, and the variables each container runtime sets inside ("-" when unset).
line="task"
for name in RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE NODE_RANK MASTER_ADDR MASTER_PORT OMP_NUM_THREADS \
            TORCHELASTIC_ERROR_FILE DDP_SNAPSHOT_DIR PYTORCH_VERSION CH_RUNNING SLURM_CONTAINER APPTAINER_CONTAINER; do
  eval "value=\${$name-}"
  line="$line $name=$(printf '%s' "${value:--}" | tr ' ' '_')"
done
echo "$line host=$(hostname) cpus=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status) mntns=$(readlink /proc/self/ns/mnt)"
