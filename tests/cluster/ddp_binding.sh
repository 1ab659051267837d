#!/usr/bin/env bash
# Topology binding on the test cluster: the socket interface is the one that reaches the master
# (eth0, not the second NIC eth1), --ddp-nic overrides it and a bad name fails the step; tasks of a node get
# disjoint CPU sets within what Slurm allowed (none with --ddp-bind=none); a node without GPUs gets CPU binding and
# a NIC only; a saved hwloc export (the admin's topology_xml, NVIDIA and AMD) is planned but binds nothing, and the
# verbose line names the rules that decided; --ddp-check runs the node checks. (The job's own HWLOC_XMLFILE is never
# read in slurmstepd: security.sh.)
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
[ -n "$DDP_PLUGIN" ] || skip "the plugin is not built"
# shellcheck disable=SC2016  # expanded by the task's shell
show='echo "$(hostname) $SLURM_PROCID nccl=${NCCL_SOCKET_IFNAME-} gloo=${GLOO_SOCKET_IFNAME-} cuda=${CUDA_VISIBLE_DEVICES-unset} fi=${FI_PROVIDER-unset} cpus=$(sed -n "s/^Cpus_allowed_list:[[:space:]]*//p" /proc/self/status)"'

check_interface_reaching_master() {
  local out
  out=$(run_on_cluster srun --ddp -N2 --ntasks-per-node=2 sh -c "$show")
  assert_eq 4 "$(echo "$out" | grep -c ' nccl=eth0 gloo=eth0 cuda=unset fi=unset ')" "eth0 on every task, no GPU variables: $out"
}

check_cpu_binding() {
  local out node all
  all=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)
  out=$(run_on_cluster srun --ddp -N2 --ntasks-per-node=2 sh -c "$show")
  for node in node1 node2; do
    # Disjoint sets that together cover the node's CPUs (this VM's CPUs, shared by the namespace nodes).
    local sets
    sets=$(echo "$out" | awk -v n="$node" '$1 == n {sub("cpus=", "", $NF); print $NF}' | sort)
    assert_eq 2 "$(echo "$sets" | sort -u | wc -l)" "two different CPU sets on $node: $out"
    [ "$(echo "$sets" | paste -sd, - | tr ',' '\n' | sort -u | wc -l)" -eq "$(echo "$sets" | paste -sd, - | tr ',' '\n' | wc -l)" ] ||
      fail "CPU sets overlap on $node: $sets"
  done
  out=$(run_on_cluster srun --ddp --ddp-bind=none -N2 --ntasks-per-node=2 sh -c "$show")
  assert_eq 4 "$(echo "$out" | grep -c " cpus=$all\$")" "--ddp-bind=none leaves the affinity alone: $out"
}

check_nic_override() {
  local out script
  out=$(run_on_cluster srun --ddp --ddp-nic=eth1 -N2 -n2 sh -c "$show")
  assert_eq 2 "$(echo "$out" | grep -c ' nccl=eth1 gloo=eth1 ')" "--ddp-nic=eth1: $out"
  # PyTorch's Gloo over the second NIC: the store on eth0's route, the data over eth1.
  script=$(stage "$(dirname "$0")/allreduce.py")
  out=$(run_on_cluster timeout 120 srun --ddp --ddp-nic=eth1 -N2 -n2 /usr/bin/python3 "$script" 2>&1) ||
    fail "Gloo over eth1 failed (exit status $?): $out"
  assert_eq 2 "$(echo "$out" | grep -c 'sum=3 expected=3 OK')" "all-reduce over eth1: $out"
  assert_fails "a missing interface" run_on_cluster srun --ddp --ddp-nic=eth9 -N2 -n2 true
  assert_contains "$FAILED_OUTPUT" "ddp: " "prefix"
  assert_contains "$FAILED_OUTPUT" "'eth9'" "the bad name"
  assert_contains "$FAILED_OUTPUT" "eth1 (up)" "the interfaces there are"
}

check_saved_topology() {
  local xml out
  xml=$(stage "$DDP_SOURCE_DIR/tests/topology/data/aws-p4d.24xlarge.xml")
  set_plugstack "required $DDP_CLUSTER_PLUGIN topology_xml=$xml"
  out=$(run_on_cluster srun --ddp --ddp-verbose -N1 -n2 sh -c "$show" 2>&1)
  # Two tasks of eight GPUs. The nodes have 4 CPUs (slurm.conf), so the step's Slurm cores are among 0-3, all on
  # the export's socket 0: the tasks take that socket's GPUs, on its two host bridges (10:1c.0 and
  # 20:1c.0, GPUs 0 and 2), listed first so that task r uses cuda:r.
  assert_eq 2 "$(echo "$out" | grep -c ' cuda=0,2,1,3,4,5,6,7 fi=efa ')" "GPU and EFA variables from the p4d export: $out"
  assert_contains "$out" "gpu=cuda:1(0000:20:1c.0)" "the second task's GPU is under socket 0's other host bridge"
  assert_contains "$out" "not bound: topology from $xml" "the verbose line says nothing was bound"
  assert_contains "$out" "gpu=cuda:0(" "the verbose line shows the task's GPU"
  assert_contains "$out" "why(gpu: local to the step's CPUs, its own PCIe path (NODE to the nearest earlier task's GPU), then device order; cpus: cores local to its GPU" \
    "the verbose line says which rule chose the second task's GPU and CPUs"
}

# An AMD node: the MI50 export's GPUs in ROCm SMI's order, ROCR_VISIBLE_DEVICES with the tasks' GPUs
# first, HIP_VISIBLE_DEVICES counting what ROCr exposes, and a value the user set for HIP kept.
check_saved_amd_topology() {
  local xml out rocm
  xml=$(stage "$DDP_SOURCE_DIR/tests/topology/data/amd-epyc-8xMI50-1xmlx5.xml")
  # shellcheck disable=SC2016  # expanded by the task's shell
  rocm='echo "$SLURM_PROCID rocr=${ROCR_VISIBLE_DEVICES-unset} hip=${HIP_VISIBLE_DEVICES-unset} cuda=${CUDA_VISIBLE_DEVICES-unset}"'
  set_plugstack "required $DDP_CLUSTER_PLUGIN topology_xml=$xml"
  out=$(run_on_cluster srun --ddp --ddp-verbose -N1 -n2 sh -c "$rocm" 2>&1)
  # The step's cores are on socket 0 (see check_saved_topology): rsmi0 (63:00.0), then rsmi1 (43:00.0), whose
  # host bridge and closest NIC differ from rsmi0's.
  assert_eq 2 "$(echo "$out" | grep -c ' rocr=0,1,2,3,4,5,6,7 hip=0,1,2,3,4,5,6,7 cuda=unset$')" \
    "ROCm variables from the MI50 export: $out"
  assert_contains "$out" "gpu=cuda:1(0000:43:00.0)" "the second task's MI50 is socket 0's second"
  out=$(run_on_cluster env HIP_VISIBLE_DEVICES=0 srun --ddp -N1 -n2 sh -c "$rocm" 2>&1)
  assert_eq 2 "$(echo "$out" | grep -c ' hip=0 ')" "a HIP_VISIBLE_DEVICES the user set is kept: $out"
}

check_node_checks() {
  local out
  out=$(run_on_cluster srun --ddp --ddp-check --ddp-verbose --ddp-snapshot-dir="$TEST_DIR/snap" -N2 -n2 true 2>&1) ||
    fail "--ddp-check on healthy nodes: $out"
  assert_eq 2 "$(echo "$out" | grep -c -- '--ddp-check on node[12]: [0-9]* checks passed')" "checks passed on both nodes: $out"
  # The NCCL backend needs a GPU, which these nodes do not have: the step fails before the program, with the reason.
  assert_fails "nccl without GPUs" run_on_cluster srun --ddp=nccl --ddp-check -N2 -n2 true
  assert_contains "$FAILED_OUTPUT" "ddp: --ddp-check failed on node" "check failure line"
  assert_contains "$FAILED_OUTPUT" "gpu.visible" "the failed check"
}

check_interface_reaching_master
check_cpu_binding
check_nic_override
check_node_checks
check_saved_topology  # these two last: they change plugstack.conf
check_saved_amd_topology
pass "socket interface, --ddp-nic, CPU binding, saved NVIDIA and AMD topologies, --ddp-check"
