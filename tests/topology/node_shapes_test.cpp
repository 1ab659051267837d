// Node shapes where the first plans went wrong (fewer tasks than GPUs, a step on part of a node, CPU-only nodes
// with several NUMA domains, AMD GPUs), replayed on saved and synthetic topologies (data/README.md) with the
// expected plans written out. Each comment says which fact of the topology and which rule of binding.hpp decides
// the value; "before" names what the plan was before these rules, where it differs.
#include <gtest/gtest.h>

#include "fixtures.hpp"
#include "topology/binding.hpp"

namespace ddp {
namespace {

using test::gpu_bus_ids;
using test::ids;
using test::task_cpus;
using test::tasks;
using Cpus = std::vector<std::vector<unsigned>>;
using Names = std::vector<std::string>;

// A step that got no GPU on a GPU node (gres asked for none).
PlanRequest cpu_only(unsigned count) {
  PlanRequest request = tasks(count);
  request.gpus.whole_node = false;
  return request;
}

Names gpu_rules(const NodePlan& plan) {
  Names out;
  for (const TaskPlacement& task : plan.tasks) out.push_back(task.gpu_rule);
  return out;
}

// ---- 1. Fewer tasks than GPUs: distinct PCIe paths within a socket ---------------------------------------

TEST(FewerTasksThanGpus, G4dnFourTasksUseBothHostBridgesOfEachSocket) {
  // g4dn.metal: package 0 has host bridges with 18:00.0+19:00.0 and 35:00.0+36:00.0, package 1 e7+e8 and f4+f5;
  // one ENA and one EFA, both on package 1, so NICs cannot tell GPUs apart. Tasks alternate sockets (0, 1, 0, 1);
  // each socket's second task takes the other host bridge. Before: 18, e7, 19, e8 (bus order, sharing the PHB).
  const NodeHardware& hw = test::g4dn();
  const NodePlan plan = plan_node(hw, tasks(4));
  EXPECT_EQ(gpu_bus_ids(hw, plan), (Names{"0000:18:00.0", "0000:e7:00.0", "0000:35:00.0", "0000:f4:00.0"}));
  EXPECT_EQ(gpu_rules(plan),
            (Names{"first in device order", "spread over sockets, then device order",
                   "its own PCIe path (NODE to the nearest earlier task's GPU), then device order",
                   "spread over sockets, its own PCIe path (NODE to the nearest earlier task's GPU), then device "
                   "order"}));
  EXPECT_EQ(plan.visible_devices, "0,4,2,6,1,3,5,7");
  // Two tasks per socket: its 24 cores in two blocks of 12 whole cores (PUs n and n+48).
  EXPECT_EQ(task_cpus(plan), (Cpus{ids("0-11,48-59"), ids("24-35,72-83"), ids("12-23,60-71"), ids("36-47,84-95")}));
  EXPECT_EQ(plan.tasks[2].cpu_rule, "cores local to its GPU: whole cores of NUMA node 0, split 2 ways");
}

TEST(FewerTasksThanGpus, P4dSixTasksThirdOnASocketTakesAHostBridgeItsNeighbourUses) {
  // p4d: two host bridges per socket, two GPUs and one ENA+EFA each. Six tasks: three per socket, so one host
  // bridge of each socket serves two tasks; the fourth pick on a socket would not exist.
  const NodeHardware& hw = test::p4d();
  const NodePlan plan = plan_node(hw, tasks(6));
  EXPECT_EQ(gpu_bus_ids(hw, plan),
            (Names{"0000:10:1c.0", "0000:90:1c.0", "0000:20:1c.0", "0000:a0:1c.0", "0000:10:1d.0", "0000:90:1d.0"}));
  EXPECT_EQ(plan.tasks[4].gpu_rule, "first in device order");  // every GPU left shares a host bridge with a pick
  for (const TaskPlacement& task : plan.tasks) EXPECT_EQ(task.nic_closeness, Closeness::Phb);
  // Three tasks per socket of 24 cores: 8 whole cores each.
  EXPECT_EQ(plan.tasks[0].cpus, ids("0-7,48-55"));
  EXPECT_EQ(plan.tasks[4].cpus, ids("16-23,64-71"));
}

TEST(FewerTasksThanGpus, SapphireRapidsSnc4FourTasksSpreadOverSocketsThenNumaDomains) {
  // Synthetic 2x SPR in SNC-4: one H100 and one HCA (PIX) per NUMA domain. Four tasks: two per socket, in two
  // of its domains; each task gets its domain's 14 cores and its own HCA.
  const NodeHardware& hw = test::spr_snc4();
  const NodePlan plan = plan_node(hw, tasks(4));
  EXPECT_EQ(gpu_bus_ids(hw, plan), (Names{"0000:13:00.0", "0000:93:00.0", "0000:33:00.0", "0000:b3:00.0"}));
  EXPECT_EQ(task_cpus(plan),
            (Cpus{ids("0-13,112-125"), ids("56-69,168-181"), ids("14-27,126-139"), ids("70-83,182-195")}));
  EXPECT_EQ(hw.rdma[*plan.tasks[3].hca].name, "mlx5_5");
  EXPECT_EQ(plan.tasks[3].hca_closeness, Closeness::Pix);
  EXPECT_EQ(plan.nccl_ib_hca, "=mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_7");
}

// ---- Task counts at and above the GPU count ---------------------------------------------------------------

TEST(TasksAtAndAboveTheGpuCount, SapphireRapidsSnc4AtAndAboveTheGpuCount) {
  const NodeHardware& hw = test::spr_snc4();
  // Eight tasks: task r on GPU r, with the 14 cores of that GPU's NUMA domain.
  const NodePlan eight = plan_node(hw, tasks(8));
  EXPECT_EQ(eight.tasks[5].cpus, ids("70-83,182-195"));  // domain 5: socket 1's second
  EXPECT_EQ(eight.tasks[5].gpu_rule, "one GPU per task, in device order");
  EXPECT_EQ(eight.tasks[5].cpu_rule, "cores local to its GPU: whole cores of NUMA node 5");
  // Sixteen: two tasks per GPU (r mod 8), seven whole cores each of the GPU's domain.
  const NodePlan sixteen = plan_node(hw, tasks(16));
  EXPECT_EQ(sixteen.tasks[13].gpu, std::optional<DeviceIndex>(5));
  EXPECT_EQ(sixteen.tasks[5].cpus, ids("70-76,182-188"));
  EXPECT_EQ(sixteen.tasks[13].cpus, ids("77-83,189-195"));
}

// ---- 2. The step's own CPUs steer the GPU choice ------------------------------------------------------------

TEST(TheStepsCpusSteerTheGpuChoice, StepOnSocketZerosCpusTakesSocketZerosGpusFirst) {
  // A two-socket node with four GPUs, two per socket (p4d's 10:1c, 20:1c on socket 0 and 90:1c, a0:1c on
  // socket 1, each under its own host bridge), all visible; the step got socket 0's CPUs only. Before: task 1
  // took 90:1c.0 on socket 1 and ran on socket 0's CPUs.
  const NodeHardware& hw = test::p4d();
  PlanRequest request = tasks(2, "0-23,48-71");
  request.gpus = gpu_allocation_from_slurm("0,2,4,6", "0,2,4,6");
  const NodePlan plan = plan_node(hw, request);
  EXPECT_EQ(gpu_bus_ids(hw, plan), (Names{"0000:10:1c.0", "0000:20:1c.0"}));
  EXPECT_EQ(gpu_rules(plan), (Names{"local to the step's CPUs, then device order", "local to the step's CPUs"}));
  EXPECT_EQ(task_cpus(plan), (Cpus{ids("0-11,48-59"), ids("12-23,60-71")}));
  EXPECT_EQ(plan.visible_devices, "0,2,4,6");
  for (const TaskPlacement& task : plan.tasks) EXPECT_TRUE(task.note.empty()) << task.note;
}

TEST(TheStepsCpusSteerTheGpuChoice, StepOnSocketOnesCoresWithAllGpusVisible) {
  // Slurm cores 24-35 are half of socket 1: the four tasks take socket 1's GPUs, over both host bridges.
  const NodeHardware& hw = test::p4d();
  PlanRequest request = tasks(4);
  request.allowed_cpus = cpus_of_cores(hw, ids("24-35"));
  const NodePlan plan = plan_node(hw, request);
  EXPECT_EQ(gpu_bus_ids(hw, plan), (Names{"0000:90:1c.0", "0000:a0:1c.0", "0000:90:1d.0", "0000:a0:1d.0"}));
  EXPECT_EQ(task_cpus(plan), (Cpus{ids("24-26,72-74"), ids("27-29,75-77"), ids("30-32,78-80"), ids("33-35,81-83")}));
}

TEST(TheStepsCpusSteerTheGpuChoice, NoGpuLocalToTheStepsCpusStillPlansWithANote) {
  // Bad input: the step's GPUs (socket 0's 10:1c, 10:1d) and its CPUs (socket 1) never meet. The plan
  // is made on the step's CPUs, and each task says why its GPU is remote.
  const NodeHardware& hw = test::p4d();
  PlanRequest request = tasks(2, "24-47,72-95");
  request.gpus = gpu_allocation_from_slurm("0,1", "0,1");
  const NodePlan plan = plan_node(hw, request);
  EXPECT_EQ(gpu_bus_ids(hw, plan), (Names{"0000:10:1c.0", "0000:10:1d.0"}));
  EXPECT_EQ(task_cpus(plan), (Cpus{ids("24-35,72-83"), ids("36-47,84-95")}));
  EXPECT_EQ(plan.tasks[1].note,
            "GPU 0000:10:1d.0 is remote: it is local to CPUs 0-23,48-71, none of which the step may use (it has "
            "24-47,72-95), so the task runs on the step's CPUs and reaches its GPU across the CPU interconnect");
  EXPECT_EQ(plan.tasks[0].cpu_rule,
            "the step's cores (none local to its GPU): whole cores of NUMA node 1, split 2 ways");
}

// ---- 3. CPU-only plans by NUMA domain ------------------------------------------------------------------------

TEST(CpuOnlyPlansByNumaDomain, KnlSnc4OneTaskPerNumaDomain) {
  // Synthetic KNL 7250 in SNC-4 flat mode: quadrants of 18, 18, 16 and 16 cores (CPUs core + 68 * thread), each
  // with a DDR node (0-3) and an MCDRAM node (4-7) of the same CPUs, which adds no domain. Before: four equal blocks
  // of 17 cores, tasks 1-3 each across a boundary (17-33, 34-50, 51-67).
  const NodeHardware& hw = test::knl();
  const NodePlan plan = plan_node(hw, tasks(4));
  EXPECT_EQ(task_cpus(plan), (Cpus{ids("0-17,68-85,136-153,204-221"), ids("18-35,86-103,154-171,222-239"),
                                   ids("36-51,104-119,172-187,240-255"), ids("52-67,120-135,188-203,256-271")}));
  for (unsigned r = 0; r < 4; ++r) {
    EXPECT_EQ(plan.tasks[r].cpu_rule, "the step's cores: whole cores of NUMA node " + std::to_string(r));
  }
}

TEST(CpuOnlyPlansByNumaDomain, KnlSnc4MultiplesDivisorsAndTheRest) {
  const NodeHardware& hw = test::knl();
  // Eight tasks (a multiple): two per quadrant, 9 + 9 cores in the large ones, 8 + 8 in the small ones.
  const NodePlan eight = plan_node(hw, tasks(8));
  EXPECT_EQ(eight.tasks[1].cpus, ids("9-17,77-85,145-153,213-221"));
  EXPECT_EQ(eight.tasks[7].cpus, ids("60-67,128-135,196-203,264-271"));
  // Two tasks (a divisor): two whole quadrants each.
  const NodePlan two = plan_node(hw, tasks(2));
  EXPECT_EQ(task_cpus(two), (Cpus{ids("0-35,68-103,136-171,204-239"), ids("36-67,104-135,172-203,240-271")}));
  EXPECT_EQ(two.tasks[1].cpu_rule, "the step's cores: whole NUMA nodes 2,3");
  // Three tasks fit neither way: 22, 23 and 23 cores; every split crosses each of the three boundaries once.
  const NodePlan three = plan_node(hw, tasks(3));
  EXPECT_EQ(task_cpus(three), (Cpus{ids("0-21,68-89,136-157,204-225"), ids("22-44,90-112,158-180,226-248"),
                                    ids("45-67,113-135,181-203,249-271")}));
  // Six tasks: 11 or 12 cores; boundaries at 18 and 52 cannot fall between blocks, the one at 36 can: the blocks
  // are 11, 11, 11, 11, 12, 12 (0-10, 11-21, 22-32, 33-43, 44-55, 56-67), crossing 18, 36 and 52 once each.
  const NodePlan six = plan_node(hw, tasks(6));
  EXPECT_EQ(six.tasks[3].cpus, ids("33-43,101-111,169-179,237-247"));
  EXPECT_EQ(six.tasks[5].cpus, ids("56-67,124-135,192-203,260-271"));
  EXPECT_EQ(six.tasks[5].cpu_rule,
            "the step's cores: an equal share of whole cores (6 tasks fit neither way on 4 NUMA domains; fewest "
            "boundaries crossed), NUMA node 3");
}

TEST(CpuOnlyPlansByNumaDomain, SapphireRapidsSnc4CpuOnlyStepsByNumaDomain) {
  // The SPR node's step without GPUs: eight NUMA domains of 14 cores (CPUs core and core + 112).
  const NodeHardware& hw = test::spr_snc4();
  const NodePlan eight = plan_node(hw, cpu_only(8));
  EXPECT_EQ(eight.rule, "no GPU for the step: CPU binding by NUMA domain and a NIC per task");
  for (unsigned r = 0; r < 8; ++r) {
    EXPECT_EQ(eight.tasks[r].cpus, ids(std::to_string(14 * r) + "-" + std::to_string(14 * r + 13) + "," +
                                       std::to_string(112 + 14 * r) + "-" + std::to_string(112 + 14 * r + 13)));
  }
  // A task without a GPU takes the NIC nearest to its first CPU's NUMA node: the HCA's IPoIB port beside it.
  EXPECT_EQ(hw.nets[*eight.tasks[2].nic].name, "ibp84s0");
  // Two tasks: one socket (four whole domains) each.
  const NodePlan two = plan_node(hw, cpu_only(2));
  EXPECT_EQ(task_cpus(two), (Cpus{ids("0-55,112-167"), ids("56-111,168-223")}));
  EXPECT_EQ(two.tasks[0].cpu_rule, "the step's cores: whole NUMA nodes 0,1,2,3");
  // Sixteen: seven whole cores each, two per domain.
  EXPECT_EQ(plan_node(hw, cpu_only(16)).tasks[3].cpus, ids("21-27,133-139"));
  // A step of socket 0's domains 0 and 1 only (Slurm cores 0-27), four tasks: two per domain.
  PlanRequest restricted = cpu_only(4);
  restricted.allowed_cpus = cpus_of_cores(hw, ids("0-27"));
  EXPECT_EQ(task_cpus(plan_node(hw, restricted)),
            (Cpus{ids("0-6,112-118"), ids("7-13,119-125"), ids("14-20,126-132"), ids("21-27,133-139")}));
}

TEST(CpuOnlyPlansByNumaDomain, CpuOnlyNodesWithOneDomainPerSocketKeepTheirPlans) {
  // The MI50 node's step without GPUs: two NUMA domains; eight tasks are four per domain, the plan contiguous
  // blocks gave before.
  const NodeHardware& hw = test::mi50_node();
  const NodePlan plan = plan_node(hw, cpu_only(8));
  EXPECT_EQ(plan.tasks[0].cpus, ids("0-5,48-53"));
  EXPECT_EQ(plan.tasks[7].cpus, ids("42-47,90-95"));
  // Threadripper 2990WX: four dies, memory on two (NUMA nodes 0 and 2); the other dies' cores are in no NUMA
  // node and count as one more domain. Three tasks: one per domain.
  const NodeHardware& workstation = test::threadripper();
  PlanRequest three = cpu_only(3);
  const NodePlan planned = plan_node(workstation, three);
  EXPECT_EQ(planned.tasks[0].cpu_rule, "the step's cores: whole cores of NUMA node 0");
  EXPECT_EQ(planned.tasks[2].cpu_rule, "the step's cores: whole cores in no NUMA node");
  EXPECT_EQ(planned.tasks[0].cpus, ids("0-7,32-39"));
}

}  // namespace
}  // namespace ddp
