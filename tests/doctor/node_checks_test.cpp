#include "doctor/checks/node_checks.hpp"

#include <gtest/gtest.h>

#include <filesystem>

#include "test_support.hpp"

namespace ddp::doctor {
namespace {

using testing::contains;
using testing::find_check;
using testing::TempDir;
using testing::write_file;

std::vector<std::string> names(const std::vector<CheckResult>& results) {
  std::vector<std::string> found;
  for (const auto& result : results) found.push_back(result.check);
  return found;
}

class NodeChecks : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string gpu = sysfs_ / "bus/pci/devices/0000:c7:00.0";
    write_file(gpu + "/vendor", "0x10de\n");
    write_file(gpu + "/class", "0x030200\n");
    std::filesystem::create_directories(sysfs_ / "bus/pci/drivers/nvidia");
    std::filesystem::create_directory_symlink("../../../bus/pci/drivers/nvidia", gpu + "/driver");
    request_.master_addr = "127.0.0.1";
    request_.snapshot_dir = snapshots_.path();
    request_.snapshot_bytes = 1024;
    request_.sysfs_root = sysfs_.path();
  }
  TempDir sysfs_;
  TempDir snapshots_;
  NodeCheckRequest request_;
};

TEST_F(NodeChecks, HealthyNodeRunsEveryCheapCheck) {
  const auto results = run_node_checks(request_);
  EXPECT_EQ(names(results),
            (std::vector<std::string>{"net.master_addr", "net.interface", "net.link_speed", "gpu.visible",
                                      "gpu.driver_bound", "storage.dir", "storage.free", "storage.device"}));
  EXPECT_EQ(find_check(results, "net.master_addr")->value, "127.0.0.1");
  EXPECT_EQ(find_check(results, "net.interface")->value, "lo up 127.0.0.1");
  EXPECT_EQ(find_check(results, "gpu.visible")->value, "1 of 1 usable");
  EXPECT_EQ(find_check(results, "gpu.driver_bound")->status, Status::Ok);
  EXPECT_EQ(find_check(results, "storage.dir")->status, Status::Ok);
  EXPECT_EQ(find_check(results, "storage.free")->status, Status::Ok);
  EXPECT_EQ(worst(results) == Status::Fail, false);
}

TEST_F(NodeChecks, EachProblemIsItsOwnFail) {
  request_.master_addr = "ddp-doctor-no-such-host.invalid";
  request_.interface = "ddpnosuch0";
  request_.env = [](const std::string& name) -> std::optional<std::string> {
    if (name == "CUDA_VISIBLE_DEVICES") return "1";  // the node has one GPU: 0
    return std::nullopt;
  };
  request_.snapshot_dir = snapshots_ / "missing";
  const auto results = run_node_checks(request_);
  EXPECT_EQ(find_check(results, "net.master_addr")->status, Status::Fail);
  EXPECT_TRUE(contains(find_check(results, "net.master_addr")->detail, "does not resolve on this node"));
  EXPECT_EQ(find_check(results, "net.interface")->status, Status::Fail);
  EXPECT_EQ(find_check(results, "net.link_speed"), nullptr);
  EXPECT_EQ(find_check(results, "gpu.visible")->status, Status::Fail);
  EXPECT_EQ(find_check(results, "storage.dir")->status, Status::Fail);
  EXPECT_EQ(find_check(results, "storage.free"), nullptr);  // nothing more to learn about a missing directory
}

TEST_F(NodeChecks, InterfaceComesFromTheTasksEnvironment) {
  request_.env = env_with({{"GLOO_SOCKET_IFNAME", "ddpnosuch1"}});
  const auto results = run_node_checks(request_);
  EXPECT_TRUE(contains(find_check(results, "net.interface")->detail, "(chosen by GLOO_SOCKET_IFNAME)"));
}

TEST_F(NodeChecks, NothingConfiguredIsSkippedNotFailed) {
  NodeCheckRequest bare;
  bare.sysfs_root = sysfs_.path();
  const auto results = run_node_checks(bare);
  EXPECT_EQ(find_check(results, "net.master_addr")->status, Status::Skip);
  EXPECT_EQ(find_check(results, "net.interface")->status, Status::Skip);
  EXPECT_EQ(find_check(results, "storage.dir")->status, Status::Skip);
  EXPECT_NE(worst(results), Status::Fail);
}

TEST_F(NodeChecks, NcclStepOnANodeWithoutGpusFailsEarly) {
  NodeCheckRequest request = request_;
  TempDir no_gpus;
  request.sysfs_root = no_gpus.path();
  request.needs_gpu = true;
  const auto results = run_node_checks(request);
  EXPECT_EQ(find_check(results, "gpu.visible")->status, Status::Fail);
  EXPECT_EQ(find_check(results, "gpu.driver_bound")->status, Status::Skip);
}

}  // namespace
}  // namespace ddp::doctor
