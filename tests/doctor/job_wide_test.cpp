// Job-wide checks: the RDMA ports read from a sysfs tree, each node's facts across the wire, and rank 0's
// comparison naming the node that differs.
#include "doctor/run/job_wide.hpp"

#include "doctor/run/wire.hpp"
#include "test_support.hpp"

namespace ddp::doctor {
namespace {

using testing::contains;
using testing::find_check;
using testing::TempDir;
using testing::write_file;

// One port of an RDMA device under `root`, as the kernel lays it out (sysfs/class/infiniband).
void add_port(const std::string& root, const std::string& device, int port, const std::string& link_layer,
              const std::string& state) {
  const std::string dir = root + "/class/infiniband/" + device + "/ports/" + std::to_string(port);
  write_file(dir + "/link_layer", link_layer + "\n");
  write_file(dir + "/state", state + "\n");
}

void add_gid(const std::string& root, const std::string& device, int index, const std::string& gid,
             const std::string& type) {
  const std::string dir = root + "/class/infiniband/" + device + "/ports/1";
  write_file(dir + "/gids/" + std::to_string(index), gid + "\n");
  if (!type.empty()) write_file(dir + "/gid_attrs/types/" + std::to_string(index), type + "\n");
}

TEST(RdmaPorts, AreListedByDeviceAndPortWithLinkLayerStateAndForRoceTheGidKinds) {
  TempDir sys;
  add_port(sys.path(), "mlx5_1", 1, "Ethernet", "4: ACTIVE");
  add_port(sys.path(), "mlx5_0", 1, "InfiniBand", "4: ACTIVE");
  add_port(sys.path(), "mlx5_0", 2, "InfiniBand", "1: DOWN");
  add_gid(sys.path(), "mlx5_1", 0, "fe80:0000:0000:0000:0a0b:0cff:fe0d:0e0f", "IB/RoCE v1");
  add_gid(sys.path(), "mlx5_1", 1, "fe80:0000:0000:0000:0a0b:0cff:fe0d:0e0f", "RoCE v2");
  add_gid(sys.path(), "mlx5_1", 2, "0000:0000:0000:0000:0000:ffff:0a00:0001", "IB/RoCE v1");
  add_gid(sys.path(), "mlx5_1", 3, "0000:0000:0000:0000:0000:ffff:0a00:0001", "RoCE v2");
  // An unpopulated index: zeros, and its type cannot be read.
  add_gid(sys.path(), "mlx5_1", 4, "0000:0000:0000:0000:0000:0000:0000:0000", "");
  EXPECT_EQ(describe_rdma_ports(sys.path()),
            "mlx5_0/1 InfiniBand ACTIVE, mlx5_0/2 InfiniBand DOWN, "
            "mlx5_1/1 Ethernet ACTIVE gids 0:v1/ipv6 1:v2/ipv6 2:v1/ipv4 3:v2/ipv4");
}

TEST(RdmaPorts, ANodeWithoutRdmaDevicesHasNone) {
  TempDir sys;
  EXPECT_EQ(describe_rdma_ports(sys.path()), "none");
  write_file(sys / "class/infiniband/mlx5_0/node_type", "1: CA\n");  // a device without ports: nothing to use
  EXPECT_EQ(describe_rdma_ports(sys.path()), "none");
}

TEST(NodeFacts, AreReadFromTheNetworkTheEnvironmentSysfsAndTheEphemeralRange) {
  TempDir sys;
  add_port(sys.path(), "efa_0", 1, "Unspecified", "4: ACTIVE");
  write_file(sys / "ip_local_port_range", "32768\t60999\n");
  NodeNetwork network;
  network.master_ip = "10.0.0.1";
  network.choice.name = "eth0";
  network.info.addresses = {"10.0.0.7"};
  const NodeFacts facts =
      read_node_facts(network, env_with({{"NCCL_IB_HCA", "=mlx5_0:1"}}), sys.path(), sys / "ip_local_port_range");
  EXPECT_EQ(facts.rdma_ports, "efa_0/1 Unspecified ACTIVE");
  EXPECT_EQ(facts.nccl_ib_hca, "=mlx5_0:1");
  EXPECT_EQ(facts.interface, "eth0");
  EXPECT_EQ(facts.master_ip, "10.0.0.1");
  EXPECT_EQ(facts.ephemeral, "32768-60999");

  // An interface without an address is none; an unreadable range is empty.
  network.info.addresses.clear();
  const NodeFacts without = read_node_facts(network, env_with({}), sys.path(), sys / "missing");
  EXPECT_EQ(without.interface, "");
  EXPECT_EQ(without.nccl_ib_hca, "");
  EXPECT_EQ(without.ephemeral, "");
}

TEST(NodeFacts, TravelWithThePeerAcrossTheWire) {
  Peer peer;
  peer.rank = 4;
  peer.host = "node3";
  peer.leader = true;
  peer.facts.rdma_ports = "mlx5_0/1 InfiniBand ACTIVE";
  peer.facts.nccl_ib_hca = "mlx5_0";
  peer.facts.interface = "ib0";
  peer.facts.master_ip = "10.0.0.1";
  peer.facts.ephemeral = "32768-60999";
  const Peer back = decode_peer(encode_peer(peer));
  EXPECT_EQ(back.facts.rdma_ports, peer.facts.rdma_ports);
  EXPECT_EQ(back.facts.nccl_ib_hca, peer.facts.nccl_ib_hca);
  EXPECT_EQ(back.facts.interface, peer.facts.interface);
  EXPECT_EQ(back.facts.master_ip, peer.facts.master_ip);
  EXPECT_EQ(back.facts.ephemeral, peer.facts.ephemeral);
  EXPECT_EQ(back.host, "node3");
}

std::vector<NodeReport> three_alike() {
  NodeFacts facts;
  facts.rdma_ports = "mlx5_0/1 InfiniBand ACTIVE";
  facts.nccl_ib_hca = "mlx5_0";
  facts.interface = "ib0";
  facts.master_ip = "10.0.0.1";
  facts.ephemeral = "32768-60999";
  return {{"node1", facts}, {"node2", facts}, {"node3", facts}};
}

TEST(CompareNodes, NodesAlikePassEveryCheck) {
  const auto results = compare_nodes(three_alike(), 29500);
  ASSERT_EQ(results.size(), 5u);
  for (const auto& result : results) EXPECT_EQ(result.status, Status::Ok) << result.check << ": " << result.detail;
  EXPECT_EQ(find_check(results, "job.rdma")->value, "mlx5_0/1 InfiniBand ACTIVE");
  EXPECT_EQ(find_check(results, "job.rdma")->detail, "on all 3 nodes");
  EXPECT_EQ(find_check(results, "job.port_range")->detail, "MASTER_PORT 29500 is outside every node's ephemeral range");
}

TEST(CompareNodes, ANodeWithAPortDownIsNamedWithWhatItHasAndWhatTheOthersHave) {
  auto nodes = three_alike();
  nodes[1].facts.rdma_ports = "mlx5_0/1 InfiniBand DOWN";
  const auto results = compare_nodes(nodes, 29500);
  const CheckResult* rdma = find_check(results, "job.rdma");
  ASSERT_NE(rdma, nullptr);
  EXPECT_EQ(rdma->status, Status::Fail);
  EXPECT_EQ(rdma->value, "differs on node2");
  EXPECT_EQ(rdma->threshold, "the same on every node");
  EXPECT_TRUE(contains(rdma->detail,
                       "node2 has 'mlx5_0/1 InfiniBand DOWN'; node1, node3 have "
                       "'mlx5_0/1 InfiniBand ACTIVE': NCCL hangs without an error"))
      << rdma->detail;
  EXPECT_TRUE(contains(rdma->detail, "set NCCL_IB_HCA to the ports every node has")) << rdma->detail;
  EXPECT_EQ(find_check(results, "job.nccl_ib_hca")->status, Status::Ok);
}

TEST(CompareNodes, TheMajorityIsTheReferenceAndOnATieRankZerosNode) {
  auto nodes = three_alike();
  nodes[0].facts.master_ip = "127.0.1.1";  // rank 0's node alone: the others are the reference
  auto results = compare_nodes(nodes, 29500);
  const CheckResult* addr = find_check(results, "job.master_addr");
  EXPECT_EQ(addr->status, Status::Fail);
  EXPECT_EQ(addr->value, "differs on node1");
  EXPECT_TRUE(contains(addr->detail, "node1 has '127.0.1.1'; node2, node3 have '10.0.0.1'")) << addr->detail;

  nodes.pop_back();  // node1 and node2 disagree, one each: node2 is named
  results = compare_nodes(nodes, 29500);
  addr = find_check(results, "job.master_addr");
  EXPECT_EQ(addr->value, "differs on node2");
}

TEST(CompareNodes, NcclIbHcaUnsetOnOneNodeFailsAndInterfacesOfOtherNamesWarn) {
  auto nodes = three_alike();
  nodes[2].facts.nccl_ib_hca = "";
  nodes[2].facts.interface = "ens5";
  const auto results = compare_nodes(nodes, 29500);
  const CheckResult* hca = find_check(results, "job.nccl_ib_hca");
  EXPECT_EQ(hca->status, Status::Fail);
  EXPECT_TRUE(contains(hca->detail, "node3 has 'unset'; node1, node2 have 'mlx5_0'")) << hca->detail;
  const CheckResult* interface = find_check(results, "job.interface");
  EXPECT_EQ(interface->status, Status::Warn);
  EXPECT_EQ(interface->value, "differs on node3");
}

TEST(CompareNodes, AMasterPortInsideANodesEphemeralRangeFailsNamingTheNodeAndItsRange) {
  auto nodes = three_alike();
  nodes[2].facts.ephemeral = "20000-60999";
  nodes[1].facts.ephemeral = "";  // unreadable there
  auto results = compare_nodes(nodes, 29500);
  const CheckResult* range = find_check(results, "job.port_range");
  EXPECT_EQ(range->status, Status::Fail);
  EXPECT_EQ(range->value, "inside on node3");
  EXPECT_TRUE(contains(range->detail, "MASTER_PORT 29500 is inside net.ipv4.ip_local_port_range on node3 20000-60999"))
      << range->detail;

  nodes[2].facts.ephemeral = "32768-60999";
  results = compare_nodes(nodes, 29500);
  range = find_check(results, "job.port_range");
  EXPECT_EQ(range->status, Status::Ok);
  EXPECT_TRUE(contains(range->detail, "(node2: unreadable)")) << range->detail;
  results = compare_nodes(nodes, 0);
  EXPECT_EQ(find_check(results, "job.port_range")->status, Status::Skip);
}

TEST(CompareNodes, OneNodeHasNothingToCompare) {
  auto nodes = three_alike();
  nodes.resize(1);
  for (const auto& result : compare_nodes(nodes, 29500)) {
    EXPECT_EQ(result.status, Status::Skip) << result.check;
    EXPECT_EQ(result.detail, "one node: nothing to compare");
  }
}

TEST(CompareNodes, ManyOddNodesAreCountedAfterTheFirstFour) {
  std::vector<NodeReport> nodes;
  for (int i = 0; i < 13; ++i) {
    NodeFacts facts;
    facts.master_ip = i < 7 ? "10.0.0.1" : "10.9.9.9";
    nodes.push_back({"n" + std::to_string(i), facts});
  }
  const auto results = compare_nodes(nodes, 29500);
  EXPECT_EQ(find_check(results, "job.master_addr")->value, "differs on n7, n8, n9, n10 and 2 more");
}

}  // namespace
}  // namespace ddp::doctor
