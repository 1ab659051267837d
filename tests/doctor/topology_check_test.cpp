#include "doctor/run/topology_check.hpp"

#include <gtest/gtest.h>

#include "test_support.hpp"

namespace ddp::doctor {
namespace {

using testing::contains;

// The name is a C string: GCC's -Wdangling-reference (seen with forky's GCC 16) warns wherever a function that returns
// a reference is given a temporary std::string, though the reference here is into the map.
const NodeHardware& hardware(const char* file) {
  static std::map<std::string, NodeHardware> loaded;
  auto found = loaded.find(file);
  if (found == loaded.end()) {
    found = loaded.emplace(file, load_node_hardware(std::string(TOPOLOGY_DATA) + "/" + file)).first;
  }
  return found->second;
}

TEST(TopologyCheck, G4dnGpusOnTheSocketWithoutANicAreNamed) {
  // g4dn.metal: ENA and EFA both hang off socket 1, so GPUs 0-3 on socket 0 reach them across sockets.
  const NodeHardware& g4dn = hardware("aws-g4dn.metal.xml");
  const CheckResult result = check_gpu_nic_closeness(g4dn);
  EXPECT_EQ(result.status, Status::Warn);
  EXPECT_EQ(result.value, "worst SYS over 8 GPU(s)");
  EXPECT_TRUE(contains(result.detail, "4 GPU(s) have no NIC on their socket: "));
  for (size_t i = 0; i < 4; ++i) EXPECT_TRUE(contains(result.detail, g4dn.gpus[i].pci_bus_id)) << i;
  for (size_t i = 4; i < 8; ++i) EXPECT_FALSE(contains(result.detail, g4dn.gpus[i].pci_bus_id)) << i;
}

TEST(TopologyCheck, P4dHasANicUnderEveryGpusHostBridge) {
  const CheckResult result = check_gpu_nic_closeness(hardware("aws-p4d.24xlarge.xml"));
  EXPECT_EQ(result.status, Status::Ok);
  EXPECT_EQ(result.value, "worst PHB over 8 GPU(s)");
}

TEST(TopologyCheck, AmdGpusOfTheSocketWithoutTheHcaAreNamed) {
  // The MI50 node's ConnectX-6 and Ethernet ports are all on package 1: package 0's four GPUs reach them across.
  const CheckResult result = check_gpu_nic_closeness(hardware("amd-epyc-8xMI50-1xmlx5.xml"));
  EXPECT_EQ(result.status, Status::Warn);
  EXPECT_TRUE(contains(result.detail, "4 GPU(s) have no NIC on their socket: 0000:63:00.0")) << result.detail;
}

TEST(TopologyCheck, NodesWithoutGpusOrNicsAreSkipped) {
  const CheckResult no_gpus = check_gpu_nic_closeness(hardware("synthetic-knl7250-snc4-flat.xml"));
  EXPECT_EQ(no_gpus.status, Status::Skip);
  EXPECT_EQ(no_gpus.detail, "no GPU in the topology");
  const CheckResult no_nics = check_gpu_nic_closeness(hardware("nvidia-dgx2h-16xV100.xml"));
  EXPECT_EQ(no_nics.status, Status::Skip);
  EXPECT_EQ(no_nics.detail, "no PCI network device in the topology");
}

TEST(TopologyCheck, PlanListsEachTasksGpuNicAndCpus) {
  PlanRequest request;
  request.tasks = 8;
  const CheckResult plan = describe_plan(hardware("aws-p4d.24xlarge.xml"), request);
  EXPECT_EQ(plan.status, Status::Ok);
  EXPECT_EQ(plan.value.rfind("8 task(s): ", 0), 0u) << plan.value;
  EXPECT_TRUE(contains(plan.detail, "task 0: GPU ")) << plan.detail;
  EXPECT_TRUE(contains(plan.detail, "; task 7: GPU ")) << plan.detail;
  EXPECT_TRUE(contains(plan.detail, "(PHB) CPUs ")) << plan.detail;
}

TEST(TopologyCheck, APlanThatCannotBeMadeIsAWarningWithTheReason) {
  PlanRequest request;
  request.gpus.whole_node = false;
  request.gpus.device_numbers = {42};  // no such /dev/nvidia42 on a p4d
  const CheckResult plan = describe_plan(hardware("aws-p4d.24xlarge.xml"), request);
  EXPECT_EQ(plan.status, Status::Warn);
  EXPECT_FALSE(plan.detail.empty());
}

}  // namespace
}  // namespace ddp::doctor
