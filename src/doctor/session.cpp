#include "doctor/session.hpp"

#include <dirent.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include "doctor/clock.hpp"
#include "doctor/cpu.hpp"
#include "doctor/gpu.hpp"
#include "doctor/link_test.hpp"
#include "doctor/node_checks.hpp"
#include "doctor/node_speed.hpp"
#include "doctor/peers.hpp"
#include "doctor/shared_dir.hpp"
#include "doctor/storage.hpp"
#include "parse.hpp"

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
  return run.options.snapshot_dir.value_or(run.env("DDP_SNAPSHOT_DIR").value_or(""));
}

NodeCheckRequest node_request(const DoctorRun& run) {
  NodeCheckRequest request;
  request.master_addr = run.launch.master_addr;
  request.interface = run.options.interface;
  request.env = run.env;
  request.snapshot_dir = snapshot_dir_of(run);
  request.snapshot_bytes = run.options.snapshot_bytes;
  request.needs_gpu = run.launch.nccl_backend;
  request.min_link_gbps = run.options.thresholds.min_net_gbps;
  return request;
}

bool passed(const std::vector<CheckResult>& results, const std::string& check) {
  for (const auto& r : results) {
    if (r.check == check) return r.status != Status::Fail && r.status != Status::Skip;
  }
  return false;
}

std::chrono::milliseconds write_budget(const DoctorRun& run) { return std::chrono::seconds(run.options.quick ? 3 : 20); }

// How long a rank may wait for the others' local checks: the disk write, plus NVML, hwloc and name lookups.
std::chrono::milliseconds local_checks_budget(const DoctorRun& run) {
  return write_budget(run) + std::chrono::seconds(30);
}

CheckResult write_bandwidth(const DoctorRun& run, const std::string& dir) {
  const uint64_t bytes = run.options.quick ? 16u << 20 : 256u << 20;
  report_progress(run, "writing up to " + format_bytes(bytes) + " with fsync to " + dir);
  try {
    return grade_write_bandwidth(measure_write(dir, bytes, write_budget(run)), run.options.thresholds.min_disk_mbps);
  } catch (const std::exception& e) {
    return make_result("storage.write_bw", Status::Fail, "failed", "", e.what());
  }
}

std::vector<CheckResult> data_dir_checks(const std::string& dir) {
  DIR* listing = opendir(dir.c_str());
  if (listing == nullptr) {
    return {make_result("data.dir", Status::Fail, "unreadable", "readable directory",
                        quote(dir) + ": " + std::strerror(errno) + "; pass the directory the training reads")};
  }
  closedir(listing);
  CheckResult device = check_storage_device(dir);
  device.check = "data.device";
  return {make_result("data.dir", Status::Ok, "readable", "readable directory", dir), device};
}

std::vector<CheckResult> gpu_driver_checks(const DoctorRun& run) {
  const NodeGpus node = scan_gpus("/sys");
  const VisibleGpus visible = parse_visible_devices(run.env(node.visible_variable()));
  return check_gpu_libraries(node, visible.all ? node.gpus.size() : visible.entries.size());
}

std::vector<CheckResult> node_leader_checks(const DoctorRun& run) {
  const NodeCheckRequest request = node_request(run);
  std::vector<CheckResult> results = run_node_checks(request);
  append(results, gpu_driver_checks(run));
  if (run.topology_checks) append(results, run.topology_checks(run.env));
  if (passed(results, "storage.dir")) results.push_back(write_bandwidth(run, request.snapshot_dir));
  if (run.options.data_dir) append(results, data_dir_checks(*run.options.data_dir));
  append(results, measure_node_speed(run.options.quick));
  return results;
}

bool is_loopback(const std::string& ip) { return ip.rfind("127.", 0) == 0 || ip == "::1"; }

// Rank 0 checks that MASTER_ADDR is its own node and that every node can use it.
std::vector<CheckResult> rendezvous_check(const std::string& master_ip, const std::vector<Peer>& peers) {
  if (master_ip.empty()) return {skipped("net.rendezvous", "MASTER_ADDR is unknown or does not resolve")};
  std::set<std::string> host_names;
  for (const auto& peer : peers) host_names.insert(peer.host);
  const size_t hosts = host_names.size();
  if (is_loopback(master_ip) && hosts > 1) {
    return {make_result("net.rendezvous", Status::Fail, master_ip, "rank 0's routable address",
                        "MASTER_ADDR resolves to a loopback address but the ranks run on " + std::to_string(hosts) +
                            " hosts: fix the hostname's line in /etc/hosts (Debian maps it to 127.0.1.1) or DNS")};
  }
  // Every 127.x address is this node's, though only 127.0.0.1 is listed on lo.
  if (!is_loopback(master_ip) && !is_local_address(master_ip)) {
    return {make_result("net.rendezvous", Status::Warn, master_ip, "an address of rank 0's node",
                        "MASTER_ADDR is not an address of rank 0's node: PyTorch's store listens on rank 0, so the "
                        "others reach it only through forwarding; srun --ddp sets it to the step's first node")};
  }
  return {make_result("net.rendezvous", Status::Ok, master_ip, "an address of rank 0's node")};
}

// Leaders serve point-to-point tests on their chosen interface's address, on an ephemeral port.
Socket open_link_listener(const DoctorRun& run, Peer& me) {
  if (!is_leader(run) || me.data_address.empty()) return Socket();
  try {
    Socket listener = Socket::listen_on(me.data_address, 0);
    me.link_port = listener.local_port();
    return listener;
  } catch (const NetError&) {
    me.data_address.clear();
    return Socket();
  }
}

std::vector<CheckResult> cross_checks(Transport& transport, const DoctorRun& run, std::vector<CheckResult>& mine) {
  const auto timeout = run.options.timeout;
  const NodeNetwork network = inspect_network(node_request(run));
  Peer me;
  me.rank = run.launch.rank;
  me.host = run.host;
  me.leader = is_leader(run);
  me.storage_ok = passed(mine, "storage.dir");
  if (passed(network.results, "net.interface")) me.data_address = network.info.addresses.front();
  const Socket listener = open_link_listener(run, me);
  const std::vector<Peer> peers = exchange_peers(transport, me, Deadline::after(timeout + local_checks_budget(run)));

  std::vector<CheckResult> found;
  if (transport.rank() == 0) {
    auto rendezvous = rendezvous_check(network.master_ip, peers);
    append(found, stamp(rendezvous, me.rank, me.host));
  }
  report_progress(run, "clocks");
  append(found, measure_clock_offsets(transport, peers, kClockRounds, run.options.thresholds.max_clock_ms,
                                      run.options.thresholds.fail_clock_s, timeout));
  report_progress(run, "shared snapshot directory");
  append(mine, check_shared_dir(transport, peers, snapshot_dir_of(run), timeout));
  const auto progress = transport.rank() == 0 ? run.progress : nullptr;
  LinkSettings links{link_test_size(run.options.quick), run.options.thresholds.min_net_gbps,
                     run.options.thresholds.max_rtt_us, timeout, progress};
  append(found, check_links(transport, peers, listener, links));
  CollectiveSetup setup;
  setup.member_index = static_cast<int>(
      std::find(transport.members().begin(), transport.members().end(), transport.rank()) - transport.members().begin());
  setup.data_address = me.data_address;
  setup.local_rank = run.launch.local_rank;
  setup.timeout = timeout;
  for (AllreduceBackend* backend : run.backends) {
    append(found, check_allreduce(transport, *backend, setup, allreduce_sizes(run.options.quick), progress));
  }
  return found;
}

}  // namespace

std::vector<CheckResult> local_checks(const DoctorRun& run) {
  report_progress(run, "checking every node");
  std::vector<CheckResult> results;
  if (is_leader(run)) {
    results = node_leader_checks(run);
  } else {
    // The node's checks belong to its leader; this task's own GPU view may still differ.
    const NodeGpus node = scan_gpus("/sys");
    results.push_back(check_visible_gpus(node, run.env(node.visible_variable()), run.launch.nccl_backend));
  }
  const unsigned cores = usable_cores();
  results.push_back(check_cores(cores, run.options.workers));
  results.push_back(check_omp_threads(run.env("OMP_NUM_THREADS"), cores));
  return stamp(results, run.launch.rank, run.host);
}

Outcome run_doctor(Transport& transport, const DoctorRun& run, std::vector<CheckResult> meeting) {
  std::vector<CheckResult> mine = local_checks(run);
  for (auto& result : meeting) {
    // Rows about other ranks (those that never connected) already say whose they are.
    if (result.rank == CheckResult::kWholeRun) {
      result.rank = run.launch.rank;
      result.host = run.host;
    }
  }
  append(mine, meeting);
  Outcome outcome;
  outcome.report.launcher = transport.describe();
  outcome.report.world_size = run.launch.world_size;
  try {
    const std::vector<CheckResult> found = cross_checks(transport, run, mine);
    const auto gathered = gather(transport, encode_results(mine), Deadline::after(run.options.timeout));
    std::vector<CheckResult> all;
    for (const auto& bytes : gathered) append(all, decode_results(bytes));
    append(all, found);
    grade_node_speeds(all, run.options.thresholds.slow_node_pct);
    const int status = exit_status(all);
    outcome.exit_status = static_cast<int>(
        WireReader(broadcast(transport, WireWriter().put_int(status).bytes(), Deadline::after(run.options.timeout)))
            .get_int());
    outcome.print = transport.rank() == 0;
    outcome.report.results = std::move(all);
  } catch (const std::exception& e) {
    // Mostly a lost or late rank (ExchangeError); anything else is reported the same way rather than crashing.
    std::vector<CheckResult> lost{make_result("exchange", Status::Fail, "stopped", "", e.what())};
    append(mine, stamp(lost, run.launch.rank, run.host));
    outcome.report.results = std::move(mine);
    outcome.print = true;
    outcome.exit_status = 1;
  }
  return outcome;
}

Outcome run_unconnected(const DoctorRun& run, const std::string& reason) {
  Outcome outcome;
  outcome.report.launcher = "tcp " + host_port(run.launch.master_addr, run.launch.master_port.value_or(0));
  outcome.report.world_size = run.launch.world_size;
  std::vector<CheckResult> results = local_checks(run);
  std::vector<CheckResult> failure{make_result("net.master_port", Status::Fail, "unreachable", "reachable", reason)};
  append(results, stamp(failure, run.launch.rank, run.host));
  outcome.report.results = std::move(results);
  outcome.print = true;
  outcome.exit_status = 1;
  return outcome;
}

std::vector<CheckResult> tcp_meeting_results(const Transport& transport, const Launch& launch,
                                             std::chrono::milliseconds timeout) {
  const std::string where = host_port(launch.master_addr, launch.master_port.value_or(0));
  const std::string threshold = "joined within " + format_seconds(static_cast<double>(timeout.count()) / 1000);
  if (transport.rank() != 0) return {make_result("net.master_port", Status::Ok, "reached " + where, threshold)};
  const auto& members = transport.members();
  std::vector<CheckResult> results{make_result(
      "net.master_port", Status::Ok, "listening on " + std::to_string(launch.master_port.value_or(0)), threshold,
      std::to_string(members.size()) + " of " + std::to_string(launch.world_size) + " ranks joined")};
  for (int rank = 1; rank < launch.world_size; ++rank) {
    if (std::find(members.begin(), members.end(), rank) != members.end()) continue;
    CheckResult missing = make_result(
        "net.master_port", Status::Fail, "never connected", threshold,
        "rank " + std::to_string(rank) + " did not reach rank 0 at " + where + ": its own output says why (its node "
        "cannot reach MASTER_ADDR:MASTER_PORT, a firewall or security group drops it, or it did not start)");
    missing.rank = rank;
    missing.host = "?";
    results.push_back(std::move(missing));
  }
  return results;
}

std::vector<CheckResult> probe_master_port(Transport& transport, const Launch& launch,
                                           std::chrono::milliseconds timeout) {
  const std::string check = "net.master_port";
  if (launch.master_addr.empty() || !launch.master_port) {
    if (transport.rank() != 0) return {};
    return {skipped(check, "no MASTER_ADDR/MASTER_PORT to probe: export them or pass --master-addr/--master-port")};
  }
  const std::string where = host_port(launch.master_addr, *launch.master_port);
  const std::string threshold = "reachable within " + format_seconds(static_cast<double>(timeout.count()) / 1000);
  Socket listener;
  std::vector<CheckResult> results;
  if (transport.rank() == 0) {
    try {
      listener = Socket::listen_on("", *launch.master_port);
      results.push_back(make_result(check, Status::Ok, "listening on " + std::to_string(*launch.master_port), threshold));
    } catch (const NetError& e) {
      results.push_back(make_result(check, Status::Fail, "in use", threshold,
                                    std::string(e.what()) + ": another program holds MASTER_PORT on rank 0's node"));
    }
  }
  const bool listening = broadcast(transport, listener.valid() ? "1" : "0", Deadline::after(timeout)) == "1";
  if (listening && transport.rank() != 0 && launch.local_rank == 0) {
    try {
      Socket::connect_to(launch.master_addr, *launch.master_port, Deadline::after(timeout));
      results.push_back(make_result(check, Status::Ok, "reached " + where, threshold));
    } catch (const NetError& e) {
      results.push_back(make_result(check, Status::Fail, "unreachable", threshold,
                                    "cannot reach " + where + ": " + e.what() +
                                        " (do firewalls or security groups allow this port between the nodes?)"));
    }
  }
  // Rank 0 keeps listening until every leader has tried.
  barrier(transport, Deadline::after(2 * timeout));
  return results;
}

}  // namespace ddp::doctor
