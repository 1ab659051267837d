#pragma once
// Job-wide checks: what must be the same on every node of a job, or NCCL hangs without an error (NCCL_IB_HCA and the
// RDMA ports a node exposes: NVIDIA/nccl#1478, #2428) or ranks meet nowhere (MASTER_ADDR resolving differently, a
// rendezvous port a node may hand to an outgoing connection). Each node's first task reads its node's facts
// (read_node_facts); they travel to rank 0 with the peers' descriptions (wire.hpp), and rank 0 compares them
// (compare_nodes): one row per check, naming the nodes that differ from the others, what they have, and the fix.
#include <cstdint>
#include <string>
#include <vector>

#include "core/env.hpp"
#include "doctor/checks/check.hpp"
#include "doctor/checks/node_checks.hpp"

namespace ddp::doctor {

struct NodeFacts {
  // The node's RDMA ports, sorted: "mlx5_0/1 InfiniBand ACTIVE", and for RoCE (link layer Ethernet) the populated
  // GID indices with their type and family, "mlx5_1/1 Ethernet ACTIVE gids 0:v1/ipv6 1:v2/ipv6 2:v1/ipv4 3:v2/ipv4"
  // (the addresses themselves are the node's own; the index NCCL picks by type and family must hold the same kind
  // everywhere). "none" without RDMA devices.
  std::string rdma_ports = "none";
  std::string nccl_ib_hca;  // NCCL_IB_HCA as the node's first task sees it; empty: unset
  std::string interface;    // the socket interface chosen for Gloo and NCCL (net.interface); empty: none
  std::string master_ip;    // MASTER_ADDR as this node resolves it; empty: it does not resolve
  std::string ephemeral;    // net.ipv4.ip_local_port_range as "32768-60999"; empty: unreadable
};

// The RDMA ports under `sysfs_root`/class/infiniband, described as NodeFacts::rdma_ports says (at most 16 devices,
// 4 ports each and 16 GID indices per port are read: a node's list stays short and its reading bounded).
std::string describe_rdma_ports(const std::string& sysfs_root);

// This node's facts: its RDMA ports, NCCL_IB_HCA from `env`, the interface and MASTER_ADDR's address that
// inspect_network found, and the ephemeral port range from `ephemeral_path`.
NodeFacts read_node_facts(const NodeNetwork& network, const EnvLookup& env, const std::string& sysfs_root,
                          const std::string& ephemeral_path);

// One node's facts as its first task gave them.
struct NodeReport {
  std::string host;
  NodeFacts facts;
};

// job.rdma, job.nccl_ib_hca, job.interface, job.master_addr and job.port_range over every node of the run (one
// report each) for rank 0, MASTER_PORT being `master_port` (0: unknown, job.port_range is skipped). With one node
// there is nothing to compare: each check is skipped, saying so.
std::vector<CheckResult> compare_nodes(const std::vector<NodeReport>& nodes, uint16_t master_port);

}  // namespace ddp::doctor
