#include "doctor/checks/interface.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "test_support.hpp"

namespace ddp::doctor {
namespace {

using testing::contains;
using testing::TempDir;
using testing::write_file;

TEST(Interface, LoopbackIsUpWithItsAddress) {
  const InterfaceInfo lo = read_interface("lo");
  EXPECT_TRUE(lo.exists);
  EXPECT_TRUE(lo.up);
  EXPECT_TRUE(lo.running);
  ASSERT_FALSE(lo.addresses.empty());
  EXPECT_EQ(lo.addresses.front(), "127.0.0.1");
  EXPECT_FALSE(lo.speed_mbps);  // loopback has no link speed
  const CheckResult ok = check_interface({"lo", "--interface", ""}, lo);
  EXPECT_EQ(ok.status, Status::Ok);
  EXPECT_EQ(ok.value, "lo up 127.0.0.1");
  EXPECT_EQ(check_link_speed(lo, 10).status, Status::Skip);
}

TEST(Interface, RouteToALoopbackAddressGoesThroughLo) {
  const auto route = choose_interface(std::nullopt, env_with({}), "127.0.0.1");
  EXPECT_EQ(route.name, "lo");
  EXPECT_EQ(route.source, "route to MASTER_ADDR");
  EXPECT_TRUE(contains(choose_interface(std::nullopt, env_with({}), "not-an-address").error,
                       "MASTER_ADDR 'not-an-address' is not a numeric IPv4 or IPv6 address"));
  EXPECT_TRUE(is_local_address("127.0.0.1"));
  EXPECT_FALSE(is_local_address("not-an-address"));
  EXPECT_FALSE(is_local_address("192.0.2.77"));  // TEST-NET-1: never assigned to a real host
}

TEST(Interface, MissingInterfaceFailsNamingItAndWhereItCameFrom) {
  const CheckResult result = check_interface({"ddpnosuch0", "GLOO_SOCKET_IFNAME", ""}, read_interface("ddpnosuch0"));
  EXPECT_EQ(result.status, Status::Fail);
  EXPECT_TRUE(contains(result.detail, "no interface 'ddpnosuch0' on this node"));
  EXPECT_TRUE(contains(result.detail, "(chosen by GLOO_SOCKET_IFNAME)"));
}

TEST(Interface, ChoiceFollowsOptionThenGlooThenNcclThenRoute) {
  EXPECT_EQ(choose_interface(std::string("eth7"), env_with({{"GLOO_SOCKET_IFNAME", "lo"}}), "").name, "eth7");
  const auto gloo =
      choose_interface(std::nullopt, env_with({{"GLOO_SOCKET_IFNAME", "lo,eth0"}, {"NCCL_SOCKET_IFNAME", "eth"}}), "");
  EXPECT_EQ(gloo.name, "lo");
  EXPECT_EQ(gloo.source, "GLOO_SOCKET_IFNAME");
  // NCCL's entries are prefixes ("l" matches lo), '=' asks for the exact name, '^' only excludes.
  EXPECT_EQ(choose_interface(std::nullopt, env_with({{"NCCL_SOCKET_IFNAME", "l"}}), "").name, "lo");
  const auto exact = choose_interface(std::nullopt, env_with({{"NCCL_SOCKET_IFNAME", "=l"}}), "");
  EXPECT_EQ(exact.name, "");
  EXPECT_TRUE(contains(exact.error, "no interface on this node matches NCCL_SOCKET_IFNAME='=l'"));
  const auto excluded = choose_interface(std::nullopt, env_with({{"NCCL_SOCKET_IFNAME", "^docker"}}), "127.0.0.1");
  EXPECT_EQ(excluded.name, "lo");
  EXPECT_EQ(excluded.source, "route to MASTER_ADDR");
  EXPECT_TRUE(contains(choose_interface(std::nullopt, env_with({}), "").error, "MASTER_ADDR is unknown"));
  EXPECT_EQ(check_interface(exact, {}).status, Status::Fail);
}

TEST(Interface, LinkSpeedFromSysfsAgainstTheTenGigabitMinimum) {
  TempDir sysfs;
  write_file(sysfs / "class/net/lo/speed", "1000\n");
  const InterfaceInfo slow = read_interface("lo", sysfs.path());
  ASSERT_TRUE(slow.speed_mbps);
  const CheckResult warn = check_link_speed(slow, 10);
  EXPECT_EQ(warn.status, Status::Warn);
  EXPECT_EQ(warn.value, "lo 1000 Mb/s");
  EXPECT_EQ(warn.threshold, ">= 10 Gbit/s");
  write_file(sysfs / "class/net/lo/speed", "100000\n");
  EXPECT_EQ(check_link_speed(read_interface("lo", sysfs.path()), 10).status, Status::Ok);
  write_file(sysfs / "class/net/lo/speed", "-1\n");  // what a link without carrier reports
  EXPECT_FALSE(read_interface("lo", sysfs.path()).speed_mbps);
}

// An interface of our own, down as created, removed again whatever the test's outcome: a dummy interface,
// or where the kernel has no dummy driver, one end of a veth pair (removing it removes its peer). Its name holds
// this process's id: tests of other runs on the machine create theirs at the same time.
class DummyInterface : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root to create a network interface";
    ip("link del " + name_);  // left by a killed run whose process id this one reuses
    created_ = ip("link add " + name_ + " type dummy") == 0 ||
               ip("link add " + name_ + " type veth peer name " + name_ + "p") == 0;
    if (!created_) GTEST_SKIP() << "neither dummy nor veth interfaces can be created here";
  }
  void TearDown() override {
    if (created_) {
      EXPECT_EQ(ip("link del " + name_), 0);
    }
  }
  static int ip(const std::string& arguments) { return std::system(("ip " + arguments + " 2>/dev/null").c_str()); }
  const std::string name_ = "ddpdn" + std::to_string(getpid());
  bool created_ = false;
};

TEST_F(DummyInterface, DownInterfaceFailsWithTheCommandThatFixesIt) {
  const InterfaceInfo info = read_interface(name_);
  EXPECT_TRUE(info.exists);
  EXPECT_FALSE(info.up);
  const CheckResult result = check_interface({name_, "--interface", ""}, info);
  EXPECT_EQ(result.status, Status::Fail);
  EXPECT_EQ(result.value, name_ + " down");
  EXPECT_TRUE(contains(result.detail, "'" + name_ + "' is down: bring it up (ip link set " + name_ + " up)"));
  EXPECT_EQ(check_link_speed(info, 10).status, Status::Skip);
}

TEST_F(DummyInterface, UpInterfaceWithoutAnAddressFails) {
  ASSERT_EQ(ip("link set " + name_ + " up"), 0);
  // A veth has a carrier once its peer is up; a dummy has no peer and always has one.
  ASSERT_EQ(std::system(
                ("ip link set " + name_ + "p up 2>/dev/null || ! ip link show " + name_ + "p >/dev/null 2>&1").c_str()),
            0);
  // The kernel marks the carrier (IFF_RUNNING) a little after the link is set up (its link watch runs deferred).
  InterfaceInfo info = read_interface(name_);
  for (int i = 0; i < 100 && !info.running; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    info = read_interface(name_);
  }
  EXPECT_TRUE(info.up);
  EXPECT_TRUE(info.addresses.empty());
  const CheckResult result = check_interface({name_, "--interface", ""}, info);
  EXPECT_EQ(result.status, Status::Fail);
  EXPECT_TRUE(contains(result.detail, "has no IP address")) << result.value << " " << result.detail;
}

}  // namespace
}  // namespace ddp::doctor
