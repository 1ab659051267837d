// Expected plans follow from the topologies in data/ (checked with lstopo-no-graphics -i) and the rules in
// binding.hpp; each comment says which fact of the topology decides the value.
#include <gtest/gtest.h>

#include "core/error.hpp"
#include "fixtures.hpp"
#include "test_common.hpp"
#include "topology/binding.hpp"

namespace ddp {
namespace {

using ddp::testing::error_of;

using test::gpu_bus_ids;
using test::ids;
using test::task_cpus;
using test::tasks;

std::vector<std::string> nic_names(const NodeHardware& hw, const NodePlan& plan) {
  std::vector<std::string> out;
  for (const TaskPlacement& task : plan.tasks) out.push_back(task.nic ? hw.nets[*task.nic].name : "-");
  return out;
}

TEST(Plan, P4dOneGpuPerTaskWithTheEfaAndEnaOfItsHostBridge) {
  const NodeHardware& hw = test::p4d();
  const NodePlan plan = plan_node(hw, tasks(8));
  EXPECT_EQ(plan.rule, "8 tasks, 8 GPUs: one GPU per task");
  EXPECT_EQ(plan.visible_devices, "0,1,2,3,4,5,6,7");
  ASSERT_EQ(plan.tasks.size(), 8u);
  for (unsigned r = 0; r < 8; ++r) {
    EXPECT_EQ(plan.tasks[r].gpu, std::optional<DeviceIndex>(r));
    EXPECT_EQ(plan.tasks[r].cuda_index, r);
    EXPECT_EQ(plan.tasks[r].nic_closeness, Closeness::Phb);
    EXPECT_EQ(plan.tasks[r].hca_closeness, Closeness::Phb);
    EXPECT_TRUE(plan.tasks[r].efa_device_rdma);  // the EFA shares the GPU's host bridge
  }
  EXPECT_EQ(nic_names(hw, plan),
            (std::vector<std::string>{"ens32", "ens32", "ens65", "ens65", "ens129", "ens129", "ens161", "ens161"}));
  EXPECT_EQ(hw.rdma[*plan.tasks[5].hca].name, "rdmap144s27");
  // GPUs 0-3 are local to package 0 (24 cores, PUs n and n+48): four tasks, six whole cores each.
  EXPECT_EQ(task_cpus(plan), (std::vector<std::vector<unsigned>>{
                                 ids("0-5,48-53"), ids("6-11,54-59"), ids("12-17,60-65"), ids("18-23,66-71"),
                                 ids("24-29,72-77"), ids("30-35,78-83"), ids("36-41,84-89"), ids("42-47,90-95")}));
  EXPECT_TRUE(plan.efa);
  EXPECT_EQ(plan.nccl_ib_hca, "");  // EFA is reached through libfabric, not NCCL's verbs transport
}

TEST(Plan, P4dEnvironmentOfATask) {
  const NodePlan plan = plan_node(test::p4d(), tasks(8));
  EXPECT_EQ(binding_env(plan, 2, "ens65"), (EnvPairs{{"CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7"},
                                                     {"CUDA_DEVICE_ORDER", "PCI_BUS_ID"},
                                                     {"NCCL_SOCKET_IFNAME", "ens65"},
                                                     {"GLOO_SOCKET_IFNAME", "ens65"},
                                                     {"FI_PROVIDER", "efa"},
                                                     {"FI_EFA_FORK_SAFE", "1"},
                                                     {"FI_EFA_USE_DEVICE_RDMA", "1"}}));
  EXPECT_NE(error_of([&] { binding_env(plan, 8, "ens65"); }).find("local rank 8"), std::string::npos);
}

TEST(Plan, G4dnSocketZeroGpusReachTheOnlyNicAcrossSockets) {
  const NodeHardware& hw = test::g4dn();
  const NodePlan plan = plan_node(hw, tasks(8));
  for (unsigned r = 0; r < 8; ++r) {
    EXPECT_EQ(hw.nets[*plan.tasks[r].nic].name, "eth0");
    // GPUs 0-3 are on package 0, the ENA and EFA on package 1 under another host bridge than GPUs 4-7.
    EXPECT_EQ(plan.tasks[r].nic_closeness, r < 4 ? Closeness::System : Closeness::Node) << r;
    EXPECT_FALSE(plan.tasks[r].efa_device_rdma) << r;
  }
  // EFA without a GPU-local EFA: libfabric's efa provider, but no device RDMA (g4dn's EFA has no RDMA read).
  EXPECT_EQ(binding_env(plan, 5, "eth0"), (EnvPairs{{"CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7"},
                                                    {"CUDA_DEVICE_ORDER", "PCI_BUS_ID"},
                                                    {"NCCL_SOCKET_IFNAME", "eth0"},
                                                    {"GLOO_SOCKET_IFNAME", "eth0"},
                                                    {"FI_PROVIDER", "efa"},
                                                    {"FI_EFA_FORK_SAFE", "1"}}));
  EXPECT_EQ(plan.tasks[0].cpus, ids("0-5,48-53"));
}

TEST(Plan, Dgx2hSixteenTasksOnFourCpusShareThemRoundRobin) {
  const NodeHardware& hw = test::dgx2h();
  const NodePlan plan = plan_node(hw, tasks(16));
  EXPECT_EQ(plan.visible_devices, "0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15");
  // Eight GPUs per package but only two single-PU cores each in this restricted export: sharing is unavoidable.
  for (unsigned r = 0; r < 8; ++r) EXPECT_EQ(plan.tasks[r].cpus, ids(r % 2 ? "1" : "0")) << r;
  for (unsigned r = 8; r < 16; ++r) EXPECT_EQ(plan.tasks[r].cpus, ids(r % 2 ? "25" : "24")) << r;
  for (const TaskPlacement& task : plan.tasks) {
    EXPECT_FALSE(task.nic);  // no NIC was kept in the export
    EXPECT_FALSE(task.hca);
  }
  EXPECT_EQ(binding_env(plan, 0, ""), (EnvPairs{{"CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15"},
                                                {"CUDA_DEVICE_ORDER", "PCI_BUS_ID"}}));
}

TEST(Plan, P100NodeBindsBothTasksToSocketZeroBesideTheHca) {
  const NodeHardware& hw = test::p100_node();
  const NodePlan plan = plan_node(hw, tasks(2));
  // Both GPUs hang off package 0 (PUs 0-17,36-53): its 18 cores are split, socket 1 stays unused.
  EXPECT_EQ(task_cpus(plan), (std::vector<std::vector<unsigned>>{ids("0-8,36-44"), ids("9-17,45-53")}));
  EXPECT_EQ(nic_names(hw, plan), (std::vector<std::string>{"hsi0", "hsi0"}));
  EXPECT_EQ(plan.tasks[1].hca_closeness, Closeness::Pix);
  EXPECT_EQ(plan.nccl_ib_hca, "=mlx5_0");
  EXPECT_EQ(binding_env(plan, 1, "hsi0"), (EnvPairs{{"CUDA_VISIBLE_DEVICES", "0,1"},
                                                    {"CUDA_DEVICE_ORDER", "PCI_BUS_ID"},
                                                    {"NCCL_SOCKET_IFNAME", "hsi0"},
                                                    {"GLOO_SOCKET_IFNAME", "hsi0"},
                                                    {"NCCL_IB_HCA", "=mlx5_0"}}));
}

TEST(Plan, Hwloc1WorkstationOneTaskOnTheNvidiaGpusDie) {
  const NodeHardware& hw = test::threadripper();
  const NodePlan plan = plan_node(hw, tasks(1));
  EXPECT_EQ(gpu_bus_ids(hw, plan), std::vector<std::string>{"0000:08:00.0"});
  EXPECT_EQ(plan.tasks[0].cpus, ids("0-7,32-39"));
  EXPECT_EQ(hw.nets[*plan.tasks[0].nic].name, "enp4s0");
  EXPECT_FALSE(plan.tasks[0].hca);
  EXPECT_EQ(binding_env(plan, 0, "enp4s0"), (EnvPairs{{"CUDA_VISIBLE_DEVICES", "0"},
                                                      {"CUDA_DEVICE_ORDER", "PCI_BUS_ID"},
                                                      {"NCCL_SOCKET_IFNAME", "enp4s0"},
                                                      {"GLOO_SOCKET_IFNAME", "enp4s0"}}));
}

TEST(Plan, AmdMi50NodeOneGpuPerTaskInRocmSmiOrder) {
  const NodeHardware& hw = test::mi50_node();
  PlanRequest request = tasks(8);
  request.gpus = gpu_allocation_from_slurm("0-7", "0-7", "ROCR_VISIBLE_DEVICES");  // AutoDetect=rsmi's numbers
  const NodePlan plan = plan_node(hw, request);
  EXPECT_EQ(plan.rule, "8 tasks, 8 GPUs: one GPU per task");
  EXPECT_EQ(plan.visible_devices_variable, "ROCR_VISIBLE_DEVICES");
  EXPECT_EQ(plan.visible_devices, "0,1,2,3,4,5,6,7");
  // Task r on rsmi<r>: ROCm SMI numbered this node's MI50s in probe order, not bus order (topology_test).
  EXPECT_EQ(gpu_bus_ids(hw, plan),
            (std::vector<std::string>{"0000:63:00.0", "0000:43:00.0", "0000:03:00.0", "0000:27:00.0", "0000:e3:00.0",
                                      "0000:c3:00.0", "0000:83:00.0", "0000:a3:00.0"}));
  // Four GPUs per package, 24 cores (PUs n and n+48) each: six whole cores per task.
  EXPECT_EQ(plan.tasks[0].cpus, ids("0-5,48-53"));
  EXPECT_EQ(plan.tasks[7].cpus, ids("42-47,90-95"));
  // The ConnectX-6 and both eno ports are on package 1: e3:00.0 shares a host bridge with eno1.
  EXPECT_EQ(plan.tasks[4].nic_closeness, Closeness::Phb);
  EXPECT_EQ(plan.tasks[0].nic_closeness, Closeness::System);
  // RCCL reads NCCL_SOCKET_IFNAME and NCCL_IB_HCA. HIP counts the GPUs ROCr exposes: 0..7 in ROCr's order.
  EXPECT_EQ(binding_env(plan, 0, "eno1"), (EnvPairs{{"ROCR_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7"},
                                                    {"HIP_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7"},
                                                    {"NCCL_SOCKET_IFNAME", "eno1"},
                                                    {"GLOO_SOCKET_IFNAME", "eno1"},
                                                    {"NCCL_IB_HCA", "=mlx5_0"}}));
}

TEST(Plan, AmdGpusUnderConstrainDevicesAreCountedFromZero) {
  const NodeHardware& hw = test::mi50_node();
  PlanRequest request = tasks(2);
  request.gpus = gpu_allocation_from_slurm("2,5", "0,1", "ROCR_VISIBLE_DEVICES");
  ASSERT_TRUE(request.gpus.cgroup_local);
  const NodePlan plan = plan_node(hw, request);
  EXPECT_EQ(gpu_bus_ids(hw, plan), (std::vector<std::string>{"0000:03:00.0", "0000:c3:00.0"}));  // rsmi2, rsmi5
  EXPECT_EQ(plan.visible_devices, "0,1");
  EXPECT_EQ(binding_env(plan, 1, "")[1], (std::pair<std::string, std::string>{"HIP_VISIBLE_DEVICES", "0,1"}));
}

TEST(Plan, AnAmdGpuNumberTheNodeLacksIsAnErrorInRocmSmisNumbering) {
  PlanRequest request = tasks(1);
  request.gpus = gpu_allocation_from_slurm("0,9", "0,9", "ROCR_VISIBLE_DEVICES");
  const std::string message = error_of([&] { plan_node(test::mi50_node(), request); });
  EXPECT_NE(message.find("this node's AMD GPUs are ROCm SMI devices 0-7"), std::string::npos) << message;
}

TEST(Plan, AmdNodeWithoutGpuAllocationLeavesNoGpuVariableWhenNoGpuIsThere) {
  // A CPU-only node whose gres names GPUs (a stale gres.conf) still gets a CPU plan, not an error.
  const NodeHardware& hw = test::knl();
  PlanRequest request = tasks(4);
  request.gpus = gpu_allocation_from_slurm("0-3", "0-3");
  const NodePlan plan = plan_node(hw, request);
  EXPECT_EQ(plan.rule, "no GPU on this node: CPU binding by NUMA domain and a NIC per task");
  EXPECT_EQ(plan.visible_devices_variable, "");
  EXPECT_EQ(binding_env(plan, 0, "eno1"), (EnvPairs{{"NCCL_SOCKET_IFNAME", "eno1"}, {"GLOO_SOCKET_IFNAME", "eno1"}}));
}

TEST(Plan, FewerTasksThanGpusSpreadOverSockets) {
  const NodeHardware& hw = test::p4d();
  const NodePlan two = plan_node(hw, tasks(2));
  // One task per socket, like Slurm's block:cyclic, each with the socket's cores and its own EFA.
  EXPECT_EQ(gpu_bus_ids(hw, two), (std::vector<std::string>{"0000:10:1c.0", "0000:90:1c.0"}));
  EXPECT_EQ(two.visible_devices, "0,4,1,2,3,5,6,7");
  EXPECT_EQ(task_cpus(two), (std::vector<std::vector<unsigned>>{ids("0-23,48-71"), ids("24-47,72-95")}));
  EXPECT_EQ(two.tasks[1].cuda_index, 1u);  // torch.cuda.set_device(LOCAL_RANK) picks 90:1c.0
  EXPECT_EQ(two.rule,
            "2 tasks, 8 GPUs: one GPU per task, local to the step's CPUs first, spread over sockets and NUMA domains, "
            "then PCIe paths, then NICs; the other 6 stay visible");
  EXPECT_EQ(two.tasks[0].gpu_rule, "first in device order");
  EXPECT_EQ(two.tasks[1].gpu_rule, "spread over sockets, then device order");

  // The third task goes back to socket 0, on the host bridge with the other EFA (20:1b.0).
  const NodePlan three = plan_node(hw, tasks(3));
  EXPECT_EQ(gpu_bus_ids(hw, three), (std::vector<std::string>{"0000:10:1c.0", "0000:90:1c.0", "0000:20:1c.0"}));
  EXPECT_EQ(hw.rdma[*three.tasks[2].hca].name, "rdmap32s27");
  EXPECT_EQ(three.visible_devices, "0,4,2,1,3,5,6,7");
  EXPECT_EQ(task_cpus(three),
            (std::vector<std::vector<unsigned>>{ids("0-11,48-59"), ids("24-47,72-95"), ids("12-23,60-71")}));
}

TEST(Plan, MoreTasksThanGpusShareThemRoundRobin) {
  const NodeHardware& hw = test::p100_node();
  const NodePlan plan = plan_node(hw, tasks(6));
  EXPECT_EQ(plan.rule, "6 tasks, 2 GPUs: tasks share GPUs round-robin, task r on cuda:(r mod 2)");
  EXPECT_EQ(plan.visible_devices, "0,1");
  for (unsigned r = 0; r < 6; ++r) {
    EXPECT_EQ(plan.tasks[r].gpu, std::optional<DeviceIndex>(r % 2));
    EXPECT_EQ(plan.tasks[r].cuda_index, r % 2);
  }
  // Six tasks on the 18 cores of socket 0: three whole cores each, none shared.
  EXPECT_EQ(task_cpus(plan),
            (std::vector<std::vector<unsigned>>{ids("0-2,36-38"), ids("3-5,39-41"), ids("6-8,42-44"), ids("9-11,45-47"),
                                                ids("12-14,48-50"), ids("15-17,51-53")}));
}

TEST(Plan, SlurmGpuSubsetWithGlobalIndices) {
  const NodeHardware& hw = test::p4d();
  PlanRequest request = tasks(4);
  request.gpus = gpu_allocation_from_slurm("4-7", "4,5,6,7");
  const NodePlan plan = plan_node(hw, request);
  EXPECT_EQ(gpu_bus_ids(hw, plan),
            (std::vector<std::string>{"0000:90:1c.0", "0000:90:1d.0", "0000:a0:1c.0", "0000:a0:1d.0"}));
  EXPECT_EQ(plan.visible_devices, "4,5,6,7");
  EXPECT_EQ(plan.tasks[0].cpus, ids("24-29,72-77"));  // the allocated GPUs' socket, split four ways
  EXPECT_EQ(plan.tasks[3].cpus, ids("42-47,90-95"));
}

TEST(Plan, SlurmGpuSubsetUnderConstrainDevicesIsCountedFromZero) {
  const NodeHardware& hw = test::p4d();
  PlanRequest request = tasks(2);
  request.gpus = gpu_allocation_from_slurm("2,5", "0,1");
  EXPECT_TRUE(request.gpus.cgroup_local);
  const NodePlan plan = plan_node(hw, request);
  EXPECT_EQ(gpu_bus_ids(hw, plan), (std::vector<std::string>{"0000:20:1c.0", "0000:90:1d.0"}));
  EXPECT_EQ(plan.visible_devices, "0,1");
  EXPECT_EQ(hw.nets[*plan.tasks[1].nic].name, "ens129");
}

TEST(Plan, GpuAllocationFromSlurmTellsLocalFromGlobalIndices) {
  EXPECT_TRUE(gpu_allocation_from_slurm(std::nullopt, "0,1").whole_node);
  EXPECT_TRUE(gpu_allocation_from_slurm("NoDevFiles", "NoDevFiles").whole_node);
  const GpuAllocation global = gpu_allocation_from_slurm("1,3", "1,3");
  EXPECT_FALSE(global.whole_node);
  EXPECT_FALSE(global.cgroup_local);
  EXPECT_EQ(global.device_numbers, (std::vector<unsigned>{1, 3}));
  EXPECT_TRUE(gpu_allocation_from_slurm("1,3", "0,1").cgroup_local);
  // Allocated 0..n-1: both numberings name the same GPUs, so reading them as global is right either way.
  EXPECT_FALSE(gpu_allocation_from_slurm("0,1", "0,1").cgroup_local);
  EXPECT_NE(error_of([] { gpu_allocation_from_slurm("0,x", "0"); }).find("SLURM_STEP_GPUS '0,x'"), std::string::npos);
  EXPECT_NE(error_of([] { gpu_allocation_from_slurm("0", "GPU-1"); }).find("CUDA_VISIBLE_DEVICES"), std::string::npos);
}

TEST(Plan, AGpuNumberTheNodeLacksIsAnError) {
  PlanRequest request = tasks(1);
  request.gpus = gpu_allocation_from_slurm("3,8", "3,8");
  const std::string message = error_of([&] { plan_node(test::p4d(), request); });
  EXPECT_NE(message.find("'3,8'"), std::string::npos) << message;
  EXPECT_NE(message.find("/dev/nvidia0-7"), std::string::npos) << message;
}

TEST(Plan, RestrictedStepCoresAreSplitWithoutOverlap) {
  const NodeHardware& hw = test::p4d();
  PlanRequest request = tasks(8);
  request.allowed_cpus = cpus_of_cores(hw, parse_id_list("0-3,24-27", "S_STEP_ALLOC_CORES"));
  EXPECT_EQ(*request.allowed_cpus, ids("0-3,24-27,48-51,72-75"));
  const NodePlan plan = plan_node(hw, request);
  // Four tasks per socket, four allowed cores per socket: one whole core (both hyperthreads) each.
  EXPECT_EQ(task_cpus(plan),
            (std::vector<std::vector<unsigned>>{ids("0,48"), ids("1,49"), ids("2,50"), ids("3,51"), ids("24,72"),
                                                ids("25,73"), ids("26,74"), ids("27,75")}));
}

TEST(Plan, GpusWithoutAllowedLocalCoresUseTheStepsOtherCores) {
  const NodeHardware& hw = test::p4d();
  PlanRequest request = tasks(8);
  request.allowed_cpus = ids("24-47,72-95");  // Slurm gave only socket 1
  const NodePlan plan = plan_node(hw, request);
  // Socket 0's GPUs fall back to the step's cores, which are socket 1's: eight tasks, three cores each.
  EXPECT_EQ(plan.tasks[0].cpus, ids("24-26,72-74"));
  EXPECT_EQ(plan.tasks[3].cpus, ids("33-35,81-83"));
  EXPECT_EQ(plan.tasks[4].cpus, ids("36-38,84-86"));
  EXPECT_EQ(plan.tasks[7].cpus, ids("45-47,93-95"));
}

TEST(Plan, FewerCoresThanTasksSplitHyperthreadsThenShare) {
  const NodeHardware& hw = test::p4d();
  PlanRequest request = tasks(4);
  request.gpus = gpu_allocation_from_slurm("0-3", "0-3");
  request.allowed_cpus = ids("0-1,48-49");
  EXPECT_EQ(task_cpus(plan_node(hw, request)),
            (std::vector<std::vector<unsigned>>{ids("0"), ids("48"), ids("1"), ids("49")}));
  request.tasks = 2;
  request.gpus = gpu_allocation_from_slurm("0-1", "0-1");
  // Two tasks, two cores: whole cores, not one hyperthread of each core per task.
  EXPECT_EQ(task_cpus(plan_node(hw, request)), (std::vector<std::vector<unsigned>>{ids("0,48"), ids("1,49")}));
}

// No fixture has a GPU whose locality encloses other GPUs' (a host bridge hwloc could only attach to the
// machine, beside GPUs local to sockets), so this node is written out: two sockets of two single-CPU cores,
// GPU 0 on socket 0, GPU 1 on socket 1, GPU 2 on the machine.
NodeHardware nested_localities() {
  NodeHardware hw;
  hw.source = "a two-socket test node";
  hw.cores = {{0}, {1}, {2}, {3}};
  hw.localities = {{ids("0-1"), {0, 1}}, {ids("2-3"), {2, 3}}, {ids("0-3"), {0, 1, 2, 3}}};
  for (size_t g = 0; g < 3; ++g) {
    Gpu gpu;
    gpu.pci_bus_id = "0000:0" + std::to_string(g) + ":00.0";
    gpu.device_number = static_cast<unsigned>(g);
    gpu.locality = g;
    hw.gpus.push_back(gpu);
  }
  for (unsigned n = 0; n < 2; ++n) {
    NumaNode node;
    node.os_index = n;
    node.locality = n;
    hw.numa_nodes.push_back(node);
  }
  return hw;
}

TEST(Plan, AGpuOfTheWholeMachineKeepsItsShareBesideSocketGpus) {
  // Sockets' GPUs may not take every core of their socket: GPU 2's task is owed a share of the machine.
  EXPECT_EQ(task_cpus(plan_node(nested_localities(), tasks(3))),
            (std::vector<std::vector<unsigned>>{ids("0"), ids("2"), ids("1,3")}));
}

// In every fixture where two GPUs have different closest NICs, their PCIe paths differ too, so the PCIe rule decides
// before the NIC rule is asked. This node is written out so that only the NIC can decide: one socket of four
// single-CPU cores, four GPUs each under its own host bridge (NODE to one another), GPUs 0 and 1 closest to eth0,
// GPUs 2 and 3 to eth1.
NodeHardware gpus_tied_but_for_their_nic() {
  NodeHardware hw;
  hw.source = "a one-socket test node";
  hw.packages = 1;
  hw.pus = 4;
  hw.cores = {{0}, {1}, {2}, {3}};
  hw.localities = {{ids("0-3"), {0, 1, 2, 3}}};
  hw.gpu_vendor = GpuVendor::Nvidia;
  for (const char* name : {"eth0", "eth1"}) {
    NetInterface net;
    net.name = name;
    hw.nets.push_back(net);
  }
  for (size_t g = 0; g < 4; ++g) {
    Gpu gpu;
    gpu.pci_bus_id = "0000:" + std::to_string(g + 1) + "0:00.0";
    gpu.device_number = static_cast<unsigned>(g);
    gpu.package = 0;
    gpu.to_gpu.assign(4, Closeness::Node);
    gpu.to_gpu[g] = Closeness::Pix;
    gpu.nic = g / 2;
    gpu.to_net = {g / 2 == 0 ? Closeness::Phb : Closeness::Node, g / 2 == 1 ? Closeness::Phb : Closeness::Node};
    hw.gpus.push_back(gpu);
  }
  NumaNode node;
  node.locality = 0;
  hw.numa_nodes.push_back(node);
  return hw;
}

TEST(Plan, TheNicDecidesWhenPciePathsTie) {
  const NodeHardware hw = gpus_tied_but_for_their_nic();
  const NodePlan plan = plan_node(hw, tasks(2));
  // Device order alone would give task 1 GPU 1, on task 0's NIC.
  EXPECT_EQ(gpu_bus_ids(hw, plan), (std::vector<std::string>{"0000:10:00.0", "0000:30:00.0"}));
  EXPECT_EQ(plan.tasks[0].gpu_rule, "first in device order");
  EXPECT_EQ(plan.tasks[1].gpu_rule, "its own NIC, then device order");
  EXPECT_EQ(nic_names(hw, plan), (std::vector<std::string>{"eth0", "eth1"}));
  EXPECT_EQ(plan.visible_devices, "0,2,1,3");
}

TEST(Plan, CpusOfSlurmCoresAndBadInput) {
  const NodeHardware& hw = test::p4d();
  EXPECT_EQ(cpus_of_cores(hw, {0, 47}), ids("0,47-48,95"));
  EXPECT_NE(error_of([&] { cpus_of_cores(hw, {48}); }).find("core 48"), std::string::npos);
  EXPECT_NE(error_of([&] { plan_node(hw, tasks(0)); }).find("task count 0"), std::string::npos);
  PlanRequest request = tasks(1);
  request.allowed_cpus = ids("0,96");
  const std::string message = error_of([&] { plan_node(hw, request); });
  EXPECT_NE(message.find("CPU 96"), std::string::npos) << message;
  EXPECT_NE(message.find("0-95"), std::string::npos) << message;
}

}  // namespace
}  // namespace ddp
