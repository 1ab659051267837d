#pragma once
// ddp-doctor's command line. Every threshold has an option, with the guides' values as defaults.
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ddp::doctor {

struct Thresholds {
  double min_net_gbps = 10;       // the guides' iperf minimum between training nodes
  double max_rtt_us = 500;        // beyond a rack or placement group
  double min_disk_mbps = 200;     // below this a snapshot stalls training (an HDD writes ~150 MB/s)
  double max_clock_ms = 100;      // logs of different nodes stop lining up
  double fail_clock_s = 300;      // munge's default credential lifetime: Slurm itself breaks
  double slow_node_pct = 20;      // a node's compute or memory bandwidth this far below the nodes' median (node_speed)
};

struct DoctorOptions {
  bool help = false;
  bool json = false;
  bool quick = false;
  std::optional<std::string> snapshot_dir;  // default: DDP_SNAPSHOT_DIR
  uint64_t snapshot_bytes = 0;              // 0: the newest file in the snapshot directory, else 1 GiB
  std::optional<std::string> data_dir;
  std::optional<std::string> interface;     // default: GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME, route to master
  std::optional<std::string> master_addr;   // default: MASTER_ADDR
  std::optional<uint16_t> master_port;      // default: MASTER_PORT
  std::chrono::milliseconds timeout{30000};
  std::optional<unsigned> workers;
  Thresholds thresholds;
};

// Throws ddp::Error with one line naming the option, the value and the fix.
DoctorOptions parse_doctor_options(const std::vector<std::string>& args);
std::string doctor_usage();

// "4G", "512M", "1.5G", "1073741824": binary units K, M, G, T with an optional "iB"/"B". Throws ddp::Error.
uint64_t parse_size(const std::string& text, const std::string& what);

}  // namespace ddp::doctor
