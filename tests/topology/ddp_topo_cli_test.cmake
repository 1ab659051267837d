# Runs ddp-topo on the fixtures and checks its table, its JSON and its errors.
# cmake -DDDP_TOPO=path/to/ddp-topo -DDATA=tests/topology/data -P ddp_topo_cli_test.cmake
cmake_minimum_required(VERSION 3.19)  # string(JSON)

function(run_topo out_var rc_var err_var)
  execute_process(COMMAND ${DDP_TOPO} ${ARGN} OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  set(${out_var} "${out}" PARENT_SCOPE)
  set(${rc_var} "${rc}" PARENT_SCOPE)
  set(${err_var} "${err}" PARENT_SCOPE)
endfunction()

function(expect_equal actual expected what)
  if(NOT "${actual}" STREQUAL "${expected}")
    message(FATAL_ERROR "${what}: expected '${expected}', got '${actual}'")
  endif()
endfunction()

function(expect_match text regex what)
  if(NOT "${text}" MATCHES "${regex}")
    message(FATAL_ERROR "${what}: no match for '${regex}' in:\n${text}")
  endif()
endfunction()

# JSON of the p4d plan: each task beside the ENA and EFA of its GPU's host bridge.
run_topo(json rc err --xml ${DATA}/aws-p4d.24xlarge.xml --json)
expect_equal("${rc}" 0 "p4d --json exit status (${err})")
string(JSON tasks LENGTH "${json}" plan tasks)
expect_equal("${tasks}" 8 "p4d task count")
string(JSON gpus LENGTH "${json}" gpus)
expect_equal("${gpus}" 8 "p4d GPU count")
string(JSON value GET "${json}" plan tasks 2 pci_bus_id)
expect_equal("${value}" "0000:20:1c.0" "task 2 GPU")
string(JSON value GET "${json}" plan tasks 2 nic)
expect_equal("${value}" "ens65" "task 2 NIC")
string(JSON value GET "${json}" plan tasks 2 hca)
expect_equal("${value}" "rdmap32s27" "task 2 HCA")
string(JSON value GET "${json}" plan tasks 2 hca_closeness)
expect_equal("${value}" "PHB" "task 2 HCA closeness")
string(JSON value GET "${json}" plan tasks 7 cpus)
expect_equal("${value}" "42-47,90-95" "task 7 CPUs")
string(JSON value GET "${json}" plan tasks 7 env FI_EFA_USE_DEVICE_RDMA)
expect_equal("${value}" "1" "task 7 FI_EFA_USE_DEVICE_RDMA")
string(JSON value GET "${json}" rdma 0 kind)
expect_equal("${value}" "EFA" "rdma kind")

# Simulated Slurm allocation under ConstrainDevices: GPUs 4-7, numbered 0-3 in the task.
run_topo(json rc err --xml ${DATA}/aws-p4d.24xlarge.xml --json --gpus 4-7 --constrain-devices --tasks 2)
expect_equal("${rc}" 0 "p4d --gpus exit status (${err})")
string(JSON value GET "${json}" plan visible_devices_variable)
expect_equal("${value}" "CUDA_VISIBLE_DEVICES" "the NVIDIA variable")
string(JSON value GET "${json}" plan visible_devices)
expect_equal("${value}" "0,2,1,3" "cgroup-local CUDA_VISIBLE_DEVICES of 2 tasks on GPUs 4-7")
string(JSON value GET "${json}" plan tasks 1 pci_bus_id)
expect_equal("${value}" "0000:a0:1c.0" "task 1 GPU: the other host bridge of socket 1")
string(JSON value GET "${json}" plan tasks 1 gpu_rule)
expect_equal("${value}" "its own PCIe path (NODE to the nearest earlier task's GPU), then device order"
             "task 1's GPU rule")
string(JSON value TYPE "${json}" plan tasks 1 note)
expect_equal("${value}" "NULL" "no note for a GPU local to the step's CPUs")

# g4dn with fewer tasks than GPUs: four tasks, two per socket, each socket's two on its two host bridges.
run_topo(table rc err --xml ${DATA}/aws-g4dn.metal.xml --tasks 4)
expect_equal("${rc}" 0 "g4dn 4 tasks exit status (${err})")
expect_match("${table}" "\n2 +2 +2 +0000:35:00.0 +eth0 +SYS +rdmap197s0 +SYS +12-23,60-71\n" "g4dn task 2: 35:00.0")
expect_match("${table}" "\ntask 2 GPU:  its own PCIe path \\(NODE to the nearest earlier task's GPU\\)" "task 2's rule")

# A step on socket 1's CPUs with socket 0's GPUs only: planned, with a note on why the GPU is remote.
run_topo(json rc err --xml ${DATA}/aws-p4d.24xlarge.xml --json --gpus 0,1 --cpus 24-47,72-95 --tasks 2)
expect_equal("${rc}" 0 "remote GPUs exit status (${err})")
string(JSON value GET "${json}" plan tasks 0 cpus)
expect_equal("${value}" "24-35,72-83" "task 0 runs on the step's CPUs")
string(JSON value GET "${json}" plan tasks 0 note)
expect_match("${value}" "^GPU 0000:10:1c.0 is remote: it is local to CPUs 0-23,48-71, none of which" "remote note")

# The table of g4dn: GPUs of socket 0 reach the only NIC across sockets.
run_topo(table rc err --xml ${DATA}/aws-g4dn.metal.xml --matrix)
expect_equal("${rc}" 0 "g4dn table exit status (${err})")
expect_match("${table}" "plan: 8 tasks, 8 GPUs: one GPU per task" "g4dn rule")
expect_match("${table}" "\n3 +3 +3 +0000:36:00.0 +eth0 +SYS +rdmap197s0 +SYS +18-23,66-71\n" "g4dn task 3")
expect_match("${table}" "\n4 +4 +4 +0000:e7:00.0 +eth0 +NODE +rdmap197s0 +NODE +24-29,72-77\n" "g4dn task 4")
expect_match("${table}" "\nGPU0 +X +PHB +NODE +NODE +SYS +SYS +SYS +SYS +SYS +SYS +0-23,48-71\n" "g4dn matrix row")

# The AMD-GPU node: MI50s in ROCm SMI's order (rsmi0 is 63:00.0), ROCR_VISIBLE_DEVICES and HIP_VISIBLE_DEVICES.
run_topo(table rc err --xml ${DATA}/amd-epyc-8xMI50-1xmlx5.xml --tasks 2)
expect_equal("${rc}" 0 "MI50 exit status (${err})")
expect_match("${table}" "8 AMD GPUs" "MI50 GPUs")
expect_match("${table}" "\n0 +0 +0 +0000:63:00.0 +hsi0 +SYS +mlx5_0 +SYS +0-23,48-71\n" "MI50 task 0")
expect_match("${table}" "\n1 +1 +4 +0000:e3:00.0 +eno1 +PHB +mlx5_0 +NODE +24-47,72-95\n" "MI50 task 1")
expect_match("${table}" "task 1 exports: ROCR_VISIBLE_DEVICES=0,4,1,2,3,5,6,7 HIP_VISIBLE_DEVICES=0,1,2,3,4,5,6,7 "
             "MI50 exports")

# A CPU-only KNL in SNC-4 (synthetic): one task per NUMA domain of 18, 18, 16 and 16 cores.
run_topo(table rc err --xml ${DATA}/synthetic-knl7250-snc4-flat.xml --tasks 4)
expect_equal("${rc}" 0 "KNL exit status (${err})")
expect_match("${table}" "no GPU on this node" "KNL rule")
expect_match("${table}" "\n1 +- +- +- +eno1 +[A-Z]+ +- +- +18-35,86-103,154-171,222-239\n" "KNL task 1")
expect_match("${table}" "\ntask 3 CPUs: the step's cores: whole cores of NUMA node 3\n" "KNL task 3's rule")

# Bad input: one line naming the value and the fix, exit status 2.
foreach(case "--tasks;0;--tasks '0'" "--cpus;1-x;--cpus '1-x'" "--bogus;;unknown option '--bogus'"
             "--xml;/nonexistent.xml;'/nonexistent.xml' cannot be read")
  list(GET case 0 option)
  list(GET case 1 value)
  list(GET case 2 expected)
  run_topo(out rc err ${option} ${value})
  expect_equal("${rc}" 2 "exit status of ${option} ${value}")
  expect_match("${err}" "^ddp-topo: [^\n]*${expected}[^\n]*\n$" "error of ${option} ${value}")
endforeach()
