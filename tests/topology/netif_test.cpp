#include "core/netif.hpp"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <algorithm>
#include <functional>

#include "core/error.hpp"
#include "test_common.hpp"

namespace ddp {
namespace {

using ddp::testing::error_of;

IpAddress ipv4(const char* text, unsigned prefix) {
  IpAddress address;
  address.family = AF_INET;
  inet_pton(AF_INET, text, address.bytes.data());
  address.prefix_length = prefix;
  return address;
}

Interface interface(const std::string& name, bool up, std::vector<IpAddress> addresses, bool loopback = false) {
  Interface result;
  result.name = name;
  result.up = up;
  result.loopback = loopback;
  result.addresses = std::move(addresses);
  return result;
}

// A node with a management network (eth0, default route) and a second fabric (ens65) on the master's subnet.
NetworkView two_networks(const std::string& master, const std::string& route) {
  NetworkView view;
  view.interfaces = {
      interface("eth0", true, {ipv4("192.0.2.2", 24)}), interface("ens65", true, {ipv4("198.51.100.7", 24)}),
      interface("ib0", false, {ipv4("203.0.113.7", 24)}), interface("lo", true, {ipv4("127.0.0.1", 8)}, true)};
  view.master_address = master;
  view.route = route;
  return view;
}

TEST(SocketInterface, ClosestNicWinsWhenUpAndOnTheMastersSubnet) {
  const auto choice = choose_socket_interface(two_networks("198.51.100.1", "eth0"), "ens65", std::nullopt, true);
  EXPECT_EQ(choice.name, "ens65");
  EXPECT_EQ(choice.reason, SocketReason::ClosestNic);
}

TEST(SocketInterface, RouteWinsWhenTheClosestNicCannotReachTheMaster) {
  // ens65 is up but the master is on eth0's subnet only.
  const auto off_subnet = choose_socket_interface(two_networks("192.0.2.1", "eth0"), "ens65", std::nullopt, true);
  EXPECT_EQ(off_subnet.name, "eth0");
  EXPECT_EQ(off_subnet.reason, SocketReason::Route);
  // ib0 is on the master's subnet but down.
  const auto down = choose_socket_interface(two_networks("203.0.113.1", "eth0"), "ib0", std::nullopt, true);
  EXPECT_EQ(down.name, "eth0");
  // No NIC known from the topology (virtual machines, containers): the route decides.
  EXPECT_EQ(choose_socket_interface(two_networks("192.0.2.1", "eth0"), std::nullopt, std::nullopt, true).name, "eth0");
}

TEST(SocketInterface, ClosestNicThatIsTheRouteIsKeptAsTheClosest) {
  const auto choice = choose_socket_interface(two_networks("10.9.9.9", "eth0"), "eth0", std::nullopt, true);
  EXPECT_EQ(choice.name, "eth0");
  EXPECT_EQ(choice.reason, SocketReason::ClosestNic);
}

TEST(SocketInterface, OverrideIsCheckedAndNamesTheInterfacesOnError) {
  const NetworkView view = two_networks("192.0.2.1", "eth0");
  const auto choice = choose_socket_interface(view, "ens65", std::string("eth0"), true);
  EXPECT_EQ(choice.name, "eth0");
  EXPECT_EQ(choice.reason, SocketReason::Override);
  const std::string missing = error_of([&] { choose_socket_interface(view, std::nullopt, std::string("eth9"), true); });
  EXPECT_NE(missing.find("--ddp-nic 'eth9': there is no such interface"), std::string::npos) << missing;
  EXPECT_NE(missing.find("eth0 (up), ens65 (up), ib0 (down), lo (up)"), std::string::npos) << missing;
  EXPECT_NE(error_of([&] { choose_socket_interface(view, std::nullopt, std::string("ib0"), true); }).find("is down"),
            std::string::npos);
  NetworkView no_address = view;
  no_address.interfaces.push_back(interface("veth1", true, {}));
  EXPECT_NE(error_of([&] {
              choose_socket_interface(no_address, std::nullopt, std::string("veth1"), true);
            }).find("has no IP address"),
            std::string::npos);
}

TEST(SocketInterface, LoopbackMasterOfAMultiNodeStepNeedsAnInterfacePeersReach) {
  // The master's host name resolves to 127.0.1.1 on the master itself (Debian's /etc/hosts).
  EXPECT_EQ(choose_socket_interface(two_networks("127.0.1.1", "lo"), "ens65", std::nullopt, true).name, "ens65");
  const std::string ambiguous =
      error_of([] { choose_socket_interface(two_networks("127.0.1.1", "lo"), std::nullopt, std::nullopt, true); });
  EXPECT_NE(ambiguous.find("loopback address"), std::string::npos) << ambiguous;
  EXPECT_NE(ambiguous.find("--ddp-nic"), std::string::npos) << ambiguous;
  NetworkView single = two_networks("127.0.1.1", "lo");
  single.interfaces.erase(single.interfaces.begin() + 1);  // eth0 is then the only one up besides lo
  const auto only = choose_socket_interface(single, std::nullopt, std::nullopt, true);
  EXPECT_EQ(only.name, "eth0");
  EXPECT_EQ(only.reason, SocketReason::OnlyInterface);
  // A single-node step talks to itself: lo is right.
  EXPECT_EQ(choose_socket_interface(two_networks("127.0.1.1", "lo"), "ens65", std::nullopt, false).name, "lo");
}

TEST(Network, ListsTheLoopbackInterfaceOfThisMachine) {
  const auto interfaces = list_interfaces();
  const auto lo = std::find_if(interfaces.begin(), interfaces.end(), [](const Interface& i) { return i.name == "lo"; });
  ASSERT_NE(lo, interfaces.end());
  EXPECT_TRUE(lo->up);
  EXPECT_TRUE(lo->loopback);
  const bool has_127 = std::any_of(lo->addresses.begin(), lo->addresses.end(), [](const IpAddress& a) {
    return a.family == AF_INET && a.bytes[0] == 127 && a.prefix_length == 8;
  });
  EXPECT_TRUE(has_127);
}

TEST(Network, RoutesTheLoopbackAddressThroughLo) {
  const NetworkView view = read_network("127.0.0.1");
  EXPECT_EQ(view.route, "lo");
  EXPECT_EQ(choose_socket_interface(view, std::nullopt, std::string("lo"), true).name, "lo");
}

TEST(Network, RoutesIpv6LoopbackThroughLo) {
  const auto interfaces = list_interfaces();
  const bool has_ipv6_loopback = std::any_of(interfaces.begin(), interfaces.end(), [](const Interface& i) {
    return i.loopback &&
           std::any_of(i.addresses.begin(), i.addresses.end(), [](const IpAddress& a) { return a.family == AF_INET6; });
  });
  if (!has_ipv6_loopback) GTEST_SKIP() << "IPv6 is off on this machine";
  EXPECT_EQ(read_network("::1").route, "lo");
}

TEST(Network, RejectsANonNumericMasterAddress) {
  const std::string message = error_of([] { read_network("node-does-not-exist"); });
  EXPECT_NE(message.find("'node-does-not-exist' is not a numeric"), std::string::npos) << message;
}

}  // namespace
}  // namespace ddp
