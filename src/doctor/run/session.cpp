#include "doctor/run/session.hpp"

#include <dirent.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include "base/parse.hpp"
#include "base/port_range.hpp"
#include "core/env_names.hpp"
#include "doctor/checks/blas.hpp"
#include "doctor/checks/container_check.hpp"
#include "doctor/checks/cpu.hpp"
#include "doctor/checks/gpu.hpp"
#include "doctor/checks/interface.hpp"
#include "doctor/checks/node_checks.hpp"
#include "doctor/checks/node_speed.hpp"
#include "doctor/checks/storage.hpp"
#include "doctor/run/clock.hpp"
#include "doctor/run/job_wide.hpp"
#include "doctor/run/links.hpp"
#include "doctor/run/shared_dir.hpp"

namespace ddp::doctor {
namespace {

constexpr int kClockRounds = 8;

std::vector<CheckResult>& stamp(std::vector<CheckResult>& results, int rank, const std::string& host) {
  for (auto& result : results) {
    result.rank = rank;
    result.host = host;
  }
  return results;
}

void append(std::vector<CheckResult>& to, const std::vector<CheckResult>& more) {
  to.insert(to.end(), more.begin(), more.end());
}

void report_progress(const DoctorRun& run, const std::string& step) {
  if (run.launch.rank == 0 && run.progress) run.progress(step);
}

bool is_leader(const DoctorRun& run) { return run.launch.local_rank == 0; }

std::string snapshot_dir_of(const DoctorRun& run) {
  return run.options.snapshot_dir.value_or(run.env(vars::kSnapshotDir).value_or(""));
}

NodeCheckRequest node_request(const DoctorRun& run) {
  NodeCheckRequest request;
  request.master_addr = run.launch.master_addr;
  request.interface = run.options.interface;
  request.env = run.env;
  request.snapshot_dir = snapshot_dir_of(run);
  request.snapshot_bytes = run.options.snapshot_bytes;
  request.needs_gpu = run.launch.backend == Backend::Nccl;
  request.min_link_gbps = run.options.thresholds.min_net_gbps;
  return request;
}

bool passed(const std::vector<CheckResult>& results, const CheckInfo& check) {
  for (const auto& r : results) {
    if (r.check == check.name) return r.status != Status::Fail && r.status != Status::Skip;
  }
  return false;
}

bool failed(const std::vector<CheckResult>& results, const CheckInfo& check) {
  for (const auto& r : results) {
    if (r.check == check.name) return r.status == Status::Fail;
  }
  return false;
}

CheckResult write_bandwidth(const DoctorRun& run, const std::string& dir) {
  const uint64_t bytes = run.options.quick ? 16u << 20 : 256u << 20;
  report_progress(run, "writing up to " + format_bytes(bytes) + " with fsync to " + dir);
  try {
    return grade_write_bandwidth(measure_write(dir, bytes, time_budget(run.options).disk_write),
                                 run.options.thresholds.min_disk_mbps);
  } catch (const std::exception& e) {
    return make_result(checks::kStorageWriteBw, Status::Fail, "failed", "", e.what());
  }
}

std::vector<CheckResult> data_dir_checks(const std::string& dir) {
  DIR* listing = opendir(dir.c_str());
  if (listing == nullptr) {
    return {make_result(checks::kDataDir, Status::Fail, "unreadable", "readable directory",
                        quote(dir) + ": " + std::strerror(errno) + "; pass the directory the training reads")};
  }
  closedir(listing);
  CheckResult device = check_storage_device(dir);
  device.check = checks::kDataDevice.name;
  return {make_result(checks::kDataDir, Status::Ok, "readable", "readable directory", dir), device};
}

std::vector<CheckResult> gpu_driver_checks(const DoctorRun& run) {
  const NodeGpus node = scan_gpus("/sys");
  const VisibleGpus visible = parse_visible_devices(run.env(node.visible_variable()));
  return check_gpu_libraries(node, visible.all ? node.gpus.size() : visible.entries.size());
}

std::vector<CheckResult> node_leader_checks(const DoctorRun& run) {
  NodeCheckRequest request = node_request(run);
  std::vector<CheckResult> results = container_checks(run.env, request.snapshot_dir);
  // The storage checks would create a missing directory: in a container that does not mount it, on the
  // container's own file system.
  if (failed(results, checks::kContainerSnapshotDir)) request.snapshot_dir.clear();
  append(results, run_node_checks(request));
  append(results, gpu_driver_checks(run));
  if (run.topology_checks) append(results, run.topology_checks(run.env));
  if (passed(results, checks::kStorageDir)) results.push_back(write_bandwidth(run, request.snapshot_dir));
  if (run.options.data_dir) append(results, data_dir_checks(*run.options.data_dir));
  results.push_back(check_blas_kernels(this_blas(), cpu_vectors()));
  append(results, measure_node_speed(run.options.quick, time_budget(run.options).node_speed));
  // The first task on the node runs the node's checks too (catalogue.hpp: "node").
  return ran_at({Where::Node, Where::NodeLeader}, results);
}

bool is_loopback(const std::string& ip) { return ip.rfind("127.", 0) == 0 || ip == "::1"; }

// Rank 0 checks that MASTER_ADDR is its own node and that every node can use it.
std::vector<CheckResult> rendezvous_check(const std::string& master_ip, const std::vector<Peer>& peers) {
  if (master_ip.empty()) return {skipped(checks::kRendezvous, "MASTER_ADDR is unknown or does not resolve")};
  std::set<std::string> host_names;
  for (const auto& peer : peers) host_names.insert(peer.host);
  const size_t hosts = host_names.size();
  if (is_loopback(master_ip) && hosts > 1) {
    return {make_result(checks::kRendezvous, Status::Fail, master_ip, "rank 0's routable address",
                        "MASTER_ADDR resolves to a loopback address but the ranks run on " + std::to_string(hosts) +
                            " hosts: fix the hostname's line in /etc/hosts (Debian maps it to 127.0.1.1) or DNS")};
  }
  // Every 127.x address is this node's, though only 127.0.0.1 is listed on lo.
  if (!is_loopback(master_ip) && !is_local_address(master_ip)) {
    return {make_result(checks::kRendezvous, Status::Warn, master_ip, "an address of rank 0's node",
                        "MASTER_ADDR is not an address of rank 0's node: PyTorch's store listens on rank 0, so the "
                        "others reach it only through forwarding; srun --ddp sets it to the step's first node")};
  }
  return {make_result(checks::kRendezvous, Status::Ok, master_ip, "an address of rank 0's node")};
}

CheckResult clock_offset(Group& group, const DoctorRun& run, Deadline deadline) {
  if (group.rank() == 0) return make_result(checks::kClockOffset, Status::Ok, "0 (reference)", "", "rank 0's clock");
  const auto& thresholds = run.options.thresholds;
  return grade_clock_offset(offset_from_rank0(*group.store(), kClockRounds, deadline), thresholds.max_clock_ms,
                            thresholds.fail_clock_s);
}

// Each node's facts, as its leader gave them.
std::vector<NodeReport> node_reports(const std::vector<Peer>& peers) {
  std::vector<NodeReport> nodes;
  for (const Peer& peer : leaders(peers)) nodes.push_back({peer.host, peer.facts});
  return nodes;
}

// `mine`: this rank's results so far, to which its cross-node ones are added (rank 0 adds the run's).
void cross_checks(Group& group, const DoctorRun& run, std::vector<CheckResult>& mine, Deadline checks_done) {
  const TimeBudget budget = time_budget(run.options);
  const NodeNetwork network = inspect_network(node_request(run));
  Peer me;
  me.rank = group.rank();
  me.host = run.host;
  me.leader = is_leader(run);
  me.storage_ok = passed(mine, checks::kStorageDir);
  if (passed(network.results, checks::kInterface)) me.data_address = network.info.addresses.front();
  if (me.leader) me.facts = read_node_facts(network, run.env, node_request(run).sysfs_root, kEphemeralRangePath);
  const std::vector<Peer> peers = exchange_peers(group, me, checks_done);

  std::vector<CheckResult> own;
  if (group.rank() == 0) {
    std::vector<CheckResult> rendezvous = rendezvous_check(network.master_ip, peers);
    append(own, ran_at({Where::RankZero}, rendezvous));
    std::vector<CheckResult> job_wide = compare_nodes(node_reports(peers), run.launch.master_port);
    append(own, ran_at({Where::RankZero}, job_wide));
  }
  if (me.leader) {
    report_progress(run, "clocks");
    own.push_back(clock_offset(group, run, Deadline::after(budget.clock)));
  }
  report_progress(run, "shared snapshot directory");
  std::vector<CheckResult> across =
      check_shared_dir(group, peers, snapshot_dir_of(run), Deadline::after(budget.shared_dir));
  append(mine, ran_at({Where::AcrossNodes}, across));
  append(mine, stamp(ran_at({Where::RankZero, Where::AcrossNodes}, own), me.rank, me.host));
  const auto progress = group.rank() == 0 ? run.progress : nullptr;
  const LinkSettings links{link_measure_size(run.options.quick, budget.link_stream),
                           run.options.thresholds.min_net_gbps, run.options.thresholds.max_rtt_us, budget.link_pair,
                           progress};
  across = check_links(group, peers, links, budget.exchange);
  append(mine, ran_at({Where::AcrossNodes}, across));
  CollectiveSetup setup;
  setup.data_address = me.data_address;
  setup.local_rank = run.launch.local_rank;
  setup.timeout = run.options.timeout;
  setup.phase = budget.allreduce;
  for (AllreduceBackend* backend : run.backends) {
    across = check_allreduce(group, *backend, setup, allreduce_sizes(run.options.quick), progress);
    append(mine, ran_at({Where::AcrossNodes}, across));
  }
}

}  // namespace

std::vector<CheckResult> local_checks(const DoctorRun& run) {
  report_progress(run, "checking every node");
  std::vector<CheckResult> results;
  if (is_leader(run)) {
    results = node_leader_checks(run);
  } else {
    // The node's checks belong to its leader; this task's own GPU view may still differ.
    // gpu.visible is the node check that every task runs (catalogue.hpp says so in its row).
    const NodeGpus node = scan_gpus("/sys");
    results.push_back(check_visible_gpus(node, run.env(node.visible_variable()), run.launch.backend == Backend::Nccl));
    ran_at({Where::Node}, results);
  }
  const unsigned cores = usable_cores();
  std::vector<CheckResult> task{check_cores(cores, run.options.workers),
                                check_omp_threads(run.env(vars::kOmpNumThreads), cores)};
  append(results, ran_at({Where::EveryTask}, task));
  return stamp(results, run.launch.rank, run.host);
}

Outcome run_doctor(Group& group, const DoctorRun& run, std::vector<CheckResult> meeting) {
  const TimeBudget budget = time_budget(run.options);
  const Deadline checks_done = Deadline::after(budget.node_checks);
  std::vector<CheckResult> mine = local_checks(run);
  for (auto& result : meeting) {
    // Rows about other ranks (those that never connected) already say whose they are.
    if (result.rank == CheckResult::kWholeRun) {
      result.rank = run.launch.rank;
      result.host = run.host;
    }
  }
  append(mine, ran_at({Where::RankZero}, meeting));
  Outcome outcome;
  outcome.report.launcher = group.describe();
  outcome.report.world_size = run.launch.world_size;
  try {
    cross_checks(group, run, mine, checks_done);
    std::vector<CheckResult> all;
    for (const auto& bytes : group.gather("results", encode_results(mine), Deadline::after(budget.exchange))) {
      append(all, decode_results(bytes));
    }
    grade_node_speeds(all, run.options.thresholds.slow_node_pct);
    const std::string status =
        group.broadcast("exit status", std::to_string(exit_status(all)), Deadline::after(budget.exchange));
    outcome.exit_status = status == "0" ? 0 : 1;
    group.finish(Deadline::after(budget.exchange));
    outcome.print = group.rank() == 0;
    outcome.report.results = std::move(all);
  } catch (const std::exception& e) {
    // Mostly a lost or late rank (ExchangeError); anything else is reported the same way rather than crashing.
    std::vector<CheckResult> lost{make_result(checks::kExchange, Status::Fail, "stopped", "", e.what())};
    append(mine, stamp(ran_at({Where::EveryTask}, lost), run.launch.rank, run.host));
    outcome.report.results = std::move(mine);
    outcome.print = true;
    outcome.exit_status = 1;
  }
  return outcome;
}

Outcome run_unconnected(const DoctorRun& run, const std::string& reason) {
  Outcome outcome;
  outcome.report.launcher = "tcp " + host_port(run.launch.master_addr, run.launch.master_port);
  outcome.report.world_size = run.launch.world_size;
  std::vector<CheckResult> results = local_checks(run);
  std::vector<CheckResult> failure{make_result(checks::kMasterPort, Status::Fail, "unreachable", "reachable", reason)};
  // net.master_port is rank 0's store; the rank that could not reach it says so for the run.
  append(results, stamp(ran_at({Where::RankZero}, failure), run.launch.rank, run.host));
  outcome.report.results = std::move(results);
  outcome.print = true;
  outcome.exit_status = 1;
  return outcome;
}

}  // namespace ddp::doctor
