#include "doctor/checks/node_checks.hpp"

#include "base/resolve.hpp"
#include "doctor/checks/gpu.hpp"
#include "doctor/checks/storage.hpp"

namespace ddp::doctor {
namespace {

EnvLookup or_empty(const EnvLookup& env) {
  if (env) return env;
  return [](const std::string&) -> std::optional<std::string> { return std::nullopt; };
}

std::vector<CheckResult> storage_checks(const NodeCheckRequest& request) {
  const std::string& dir = request.snapshot_dir;
  if (dir.empty()) {
    return {skipped(checks::kStorageDir,
                    "no snapshot directory: set DDP_SNAPSHOT_DIR (srun --ddp-snapshot-dir) or "
                    "pass --snapshot-dir")};
  }
  CheckResult usable = check_snapshot_dir(dir);
  if (usable.status == Status::Fail) return {usable};
  const uint64_t bytes = request.snapshot_bytes ? request.snapshot_bytes : guess_snapshot_bytes(dir);
  return {usable, check_free_space(dir, bytes), check_storage_device(dir, request.sysfs_root)};
}

std::vector<CheckResult> gpu_checks(const NodeCheckRequest& request) {
  const NodeGpus node = scan_gpus(request.sysfs_root);
  return {check_visible_gpus(node, or_empty(request.env)(node.visible_variable()), request.needs_gpu),
          check_gpu_drivers(node)};
}

// A fault of the checks themselves is reported as a FAIL rather than thrown into slurmstepd.
std::vector<CheckResult> internal_failure(const char* reason) noexcept {
  try {
    return {make_result(checks::kNodeChecks, Status::Fail, "error", "", reason)};
  } catch (...) {
    return {};  // out of memory: nothing can be reported
  }
}

}  // namespace

NodeNetwork inspect_network(const NodeCheckRequest& request) {
  NodeNetwork network;
  if (request.master_addr.empty()) {
    network.results.push_back(skipped(checks::kMasterAddr, "MASTER_ADDR is not set: not started by srun --ddp"));
  } else {
    try {
      network.master_ip = resolve_host(request.master_addr);
      network.results.push_back(make_result(checks::kMasterAddr, Status::Ok, network.master_ip, "resolves",
                                            "MASTER_ADDR=" + request.master_addr));
    } catch (const std::exception& e) {
      network.results.push_back(make_result(checks::kMasterAddr, Status::Fail, "unresolved", "resolves", e.what()));
    }
  }
  network.choice = choose_interface(request.interface, or_empty(request.env), network.master_ip);
  if (network.choice.name.empty() && network.master_ip.empty()) {
    // Nothing names an interface and there is no master to route to: net.master_addr already says why.
    network.results.push_back(skipped(checks::kInterface, "no --interface, GLOO_SOCKET_IFNAME or usable MASTER_ADDR"));
    return network;
  }
  if (!network.choice.name.empty()) network.info = read_interface(network.choice.name, request.sysfs_root);
  network.results.push_back(check_interface(network.choice, network.info));
  if (network.results.back().status != Status::Fail) {
    network.results.push_back(check_link_speed(network.info, request.min_link_gbps));
  }
  return network;
}

std::vector<CheckResult> run_node_checks(const NodeCheckRequest& request) noexcept {
  try {
    std::vector<CheckResult> results = inspect_network(request).results;
    for (auto&& part : {gpu_checks(request), storage_checks(request)}) {
      results.insert(results.end(), part.begin(), part.end());
    }
    // Inside slurmstepd: only the node's own checks, and a misplaced one becomes node.checks' FAIL below.
    return ran_at({Where::Node}, results);
  } catch (const std::exception& e) {  // std::logic_error from ran_at among them
    return internal_failure(e.what());
  } catch (...) {
    return internal_failure("unknown error");
  }
}

}  // namespace ddp::doctor
