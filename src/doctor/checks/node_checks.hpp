#pragma once
// The cheap per-node checks, for `srun --ddp-check` inside slurmstepd and for ddp-doctor on every node:
// no network traffic (one name lookup of MASTER_ADDR, as the plugin does anyway), no child processes, no
// exceptions, a few system calls and sysfs reads (well under a millisecond, plus the name lookup).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/env.hpp"
#include "doctor/checks/check.hpp"
#include "doctor/checks/interface.hpp"

namespace ddp::doctor {

struct NodeCheckRequest {
  std::string master_addr;               // MASTER_ADDR; empty: net.* checks are skipped
  std::optional<std::string> interface;  // the socket interface forced for the tasks; unset: see choose_interface
  // The tasks' environment as they will see it (GLOO_/NCCL_SOCKET_IFNAME, CUDA_VISIBLE_DEVICES or
  // ROCR_VISIBLE_DEVICES: unset means every GPU); may be empty.
  EnvLookup env;
  std::string snapshot_dir;     // DDP_SNAPSHOT_DIR; empty: storage.* checks are skipped
  uint64_t snapshot_bytes = 0;  // 0: the newest file in snapshot_dir, else 1 GiB
  bool needs_gpu = false;       // the backend is NCCL (RCCL): no usable GPU is a FAIL
  double min_link_gbps = 10;
  std::string sysfs_root = "/sys";
};

// net.master_addr, net.interface, net.link_speed, gpu.visible, gpu.driver_bound, storage.dir, storage.free,
// storage.device. Any FAIL means the step would not train; WARNs are worth printing. Empty only when even the
// report of an internal fault could not be allocated.
std::vector<CheckResult> run_node_checks(const NodeCheckRequest& request) noexcept;

// What the network checks found, for the cross-node tests that use the same interface.
struct NodeNetwork {
  std::string master_ip;  // MASTER_ADDR resolved; empty when it does not resolve
  InterfaceChoice choice;
  InterfaceInfo info;
  std::vector<CheckResult> results;  // net.master_addr, net.interface, net.link_speed
};
NodeNetwork inspect_network(const NodeCheckRequest& request);

}  // namespace ddp::doctor
