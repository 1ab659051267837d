#pragma once
// ddp-doctor's command line. Every threshold has an option, with the guides' values as defaults.
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ddp::doctor {

struct Thresholds {
  double min_net_gbps = 10;    // the guides' iperf minimum between training nodes
  double max_rtt_us = 500;     // beyond a rack or placement group
  double min_disk_mbps = 200;  // below this a snapshot stalls training (an HDD writes ~150 MB/s)
  double max_clock_ms = 100;   // logs of different nodes stop lining up
  double fail_clock_s = 300;   // munge's default credential lifetime: Slurm itself breaks
  double slow_node_pct = 20;   // a node's compute or memory bandwidth this far below the nodes' median (node_speed)
};

struct DoctorOptions {
  bool help = false;
  bool list_checks = false;  // print the catalogue of checks (catalogue.hpp) and exit
  bool json = false;
  bool quick = false;
  std::optional<std::string> snapshot_dir;  // default: DDP_SNAPSHOT_DIR
  uint64_t snapshot_bytes = 0;              // 0: the newest file in the snapshot directory, else 1 GiB
  std::optional<std::string> data_dir;
  std::optional<std::string> interface;    // default: GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME, route to master
  std::optional<std::string> master_addr;  // default: MASTER_ADDR
  std::optional<uint16_t> master_port;     // default: MASTER_PORT
  std::chrono::milliseconds timeout{30000};
  std::optional<unsigned> workers;
  Thresholds thresholds;
};

// Throws ddp::Error with one line naming the option, the value and the fix.
DoctorOptions parse_doctor_options(const std::vector<std::string>& args);

// How long each phase of a run may take, all from the options: every wait of a rank ends by its phase's deadline,
// so a run ends within total() however its peers fail, and --help can say how long that is.
struct TimeBudget {
  using ms = std::chrono::milliseconds;
  ms meet;         // 2 x --timeout: rank 0 waits --timeout for the ranks, which wait as long again for its answer
  ms clock;        // --timeout: the leaders' probes of rank 0's clock
  ms disk_write;   // the snapshot write test: 3 s with --quick, else 20 s
  ms node_speed;   // the node's GEMM and memory bandwidth (node_speed.hpp): 2 s with --quick, else 10 s
  ms node_checks;  // the disk write + the node speed + 30 s for NVML, hwloc and name lookups, + --timeout to
                   // exchange the results
  ms exchange;     // --timeout: one exchange between ranks (clock offsets, the report, the exit status)
  ms shared_dir;   // --timeout + 3 s for a network file system to show the other nodes' files
  ms link_stream;  // the point-to-point stream: 0.5 s with --quick, else 3 s
  ms link_pair;    // --timeout + link_stream: one pair of nodes, connected and measured (pairs go one at a time,
                   // and the ranks wait --timeout more for the last)
  ms allreduce;    // 4 x --timeout per backend: set-up, Gloo's connection, the first all-reduce, the results

  ms total(size_t nodes, size_t backends) const;
};
TimeBudget time_budget(const DoctorOptions& options);

// The usage text, ending with the time budget of `options` for `backends` all-reduce backends.
std::string doctor_usage(const DoctorOptions& options, size_t backends);

// "4G", "512M", "1.5G", "1073741824": binary units K, M, G, T with an optional "iB"/"B". Throws ddp::Error.
uint64_t parse_size(const std::string& text, const std::string& what);

}  // namespace ddp::doctor
