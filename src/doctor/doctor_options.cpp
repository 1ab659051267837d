#include "doctor/doctor_options.hpp"

#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>

#include "doctor/check.hpp"
#include "error.hpp"
#include "parse.hpp"

namespace ddp::doctor {
namespace {

double parse_positive(const std::string& text, const std::string& what) {
  char* end = nullptr;
  const double value = text.empty() ? 0 : std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !std::isfinite(value) || value <= 0) {
    throw Error(what + " " + quote(text) + " is not a positive number; write it like 10 or 2.5");
  }
  return value;
}

using Setter = std::function<void(DoctorOptions&, const std::string&)>;

const std::map<std::string, Setter>& valued_options() {
  static const std::map<std::string, Setter> table{
      {"--snapshot-dir", [](DoctorOptions& o, const std::string& v) { o.snapshot_dir = v; }},
      {"--snapshot-size",
       [](DoctorOptions& o, const std::string& v) { o.snapshot_bytes = parse_size(v, "--snapshot-size"); }},
      {"--data-dir", [](DoctorOptions& o, const std::string& v) { o.data_dir = v; }},
      {"--interface", [](DoctorOptions& o, const std::string& v) { o.interface = v; }},
      {"--master-addr", [](DoctorOptions& o, const std::string& v) { o.master_addr = v; }},
      {"--master-port",
       [](DoctorOptions& o, const std::string& v) {
         o.master_port = static_cast<uint16_t>(require_uint(v, 1, 65535, "--master-port"));
       }},
      {"--timeout",
       [](DoctorOptions& o, const std::string& v) {
         o.timeout = std::chrono::milliseconds(std::lround(parse_positive(v, "--timeout") * 1000));
       }},
      {"--workers",
       [](DoctorOptions& o, const std::string& v) {
         o.workers = static_cast<unsigned>(require_uint(v, 0, 4096, "--workers"));
       }},
      {"--min-net-gbps",
       [](DoctorOptions& o, const std::string& v) { o.thresholds.min_net_gbps = parse_positive(v, "--min-net-gbps"); }},
      {"--max-rtt-us",
       [](DoctorOptions& o, const std::string& v) { o.thresholds.max_rtt_us = parse_positive(v, "--max-rtt-us"); }},
      {"--min-disk-mbps",
       [](DoctorOptions& o, const std::string& v) {
         o.thresholds.min_disk_mbps = parse_positive(v, "--min-disk-mbps");
       }},
      {"--max-clock-ms",
       [](DoctorOptions& o, const std::string& v) { o.thresholds.max_clock_ms = parse_positive(v, "--max-clock-ms"); }},
      {"--straggler-threshold",
       [](DoctorOptions& o, const std::string& v) {
         o.thresholds.slow_node_pct = parse_positive(v, "--straggler-threshold");
       }},
  };
  return table;
}

std::string usage_text() {
  return R"(usage: srun --ddp [srun options] ddp-doctor [options]
       mpirun -np N ddp-doctor [options]
       ddp-doctor [options]                     (this node only)

Checks what distributed training needs, on every node of the step, and prints one table (rank 0):
GPUs (PCI, driver, NVML), CPU cores and OMP_NUM_THREADS, the network interface, MASTER_ADDR and
MASTER_PORT, point-to-point bandwidth and latency between nodes, all-reduce bus bandwidth (Gloo; NCCL
where built with CUDA), the snapshot directory (writable, shared by all nodes, free space, device,
write bandwidth) and clock offsets. Exit status: 0 all passed (warnings allowed), 1 a check failed,
2 bad usage. Ranks come from torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
MASTER_PORT: srun --ddp sets them), else from OpenMPI's (OMPI_COMM_WORLD_*); rank 0 serves the
ranks' key-value store on MASTER_PORT.

options:
  --quick                 small transfers and writes (seconds), for tests and a first look
  --json                  print the report as JSON instead of a table
  --snapshot-dir DIR      the snapshot directory to check (default: DDP_SNAPSHOT_DIR)
  --snapshot-size SIZE    size of one snapshot, like 4G (default: the newest file there, else 1G)
  --data-dir DIR          also check the training data's directory (device kind)
  --interface NAME        socket interface to check and test over (default: GLOO_SOCKET_IFNAME,
                          NCCL_SOCKET_IFNAME, else the one whose route reaches MASTER_ADDR)
  --master-addr HOST      rank 0's node (default: MASTER_ADDR)
  --master-port N         rank 0 listens here (default: MASTER_PORT)
  --timeout SECONDS       longest wait for another rank at any step (default: 30)
  --workers N             data-loader workers per rank, checked against the rank's cores
  --min-net-gbps X        WARN below this point-to-point bandwidth (default: 10)
  --max-rtt-us X          WARN above this round trip between nodes (default: 500)
  --min-disk-mbps X       WARN below this snapshot write bandwidth (default: 200)
  --max-clock-ms X        WARN above this clock offset between nodes (default: 100)
  --straggler-threshold P WARN for a node whose GEMM or memory bandwidth is more than P% below the nodes'
                          median (default: 20, as ddp-train's)
  --list-checks           list every check: its name in the report, where it runs, what it checks and the
                          option that moves its threshold
  -h, --help              this text
)";
}

}  // namespace

uint64_t parse_size(const std::string& text, const std::string& what) {
  char* end = nullptr;
  const double number = text.empty() ? -1 : std::strtod(text.c_str(), &end);
  const std::string unit = end ? std::string(end) : "";
  static const std::map<std::string, double> kUnits{{"", 1},
                                                    {"B", 1},
                                                    {"K", 1024.0},
                                                    {"KiB", 1024.0},
                                                    {"M", 1048576.0},
                                                    {"MiB", 1048576.0},
                                                    {"G", 1073741824.0},
                                                    {"GiB", 1073741824.0},
                                                    {"T", 1099511627776.0},
                                                    {"TiB", 1099511627776.0}};
  const auto scale = kUnits.find(unit);
  if (number <= 0 || !std::isfinite(number) || scale == kUnits.end() || text[0] == '+' ||
      number * scale->second >= 1.8e19) {
    throw Error(what + " " + quote(text) + " is not a size; write it in bytes or with K, M, G or T, like 4G");
  }
  return static_cast<uint64_t>(number * scale->second);
}

DoctorOptions parse_doctor_options(const std::vector<std::string>& args) {
  DoctorOptions options;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "-h" || arg == "--help") {
      options.help = true;
    } else if (arg == "--list-checks") {
      options.list_checks = true;
    } else if (arg == "--json") {
      options.json = true;
    } else if (arg == "--quick") {
      options.quick = true;
    } else {
      const size_t equals = arg.find('=');
      const std::string name = arg.substr(0, equals);
      const auto option = valued_options().find(name);
      if (option == valued_options().end()) {
        throw Error("unknown option " + quote(arg) + "; ddp-doctor --help lists the options");
      }
      if (equals == std::string::npos && i + 1 >= args.size()) {
        throw Error("option " + name + " needs a value, like " + name + "=VALUE");
      }
      option->second(options, equals == std::string::npos ? args[++i] : arg.substr(equals + 1));
    }
  }
  return options;
}

TimeBudget time_budget(const DoctorOptions& options) {
  using std::chrono::seconds;
  const auto timeout = options.timeout;
  TimeBudget budget{};
  budget.meet = 2 * timeout;
  budget.disk_write = options.quick ? seconds(3) : seconds(20);
  budget.node_speed = options.quick ? seconds(2) : seconds(10);
  budget.node_checks = budget.disk_write + budget.node_speed + seconds(30) + timeout;
  budget.exchange = timeout;
  budget.clock = timeout;
  budget.shared_dir = timeout + seconds(3);
  budget.link_stream = options.quick ? TimeBudget::ms(500) : seconds(3);
  budget.link_pair = timeout + budget.link_stream;
  budget.allreduce = 4 * timeout;
  return budget;
}

TimeBudget::ms TimeBudget::total(size_t nodes, size_t backends) const {
  // Meeting, node checks, clock offsets, shared directory, links, all-reduces, then the report, the exit status and
  // rank 0's wait for the others to have read it.
  return meet + node_checks + clock + shared_dir + static_cast<int>(nodes) * link_pair + exchange +
         static_cast<int>(backends) * allreduce + 3 * exchange;
}

std::string doctor_usage(const DoctorOptions& options, size_t backends) {
  const TimeBudget budget = time_budget(options);
  const auto seconds = [](TimeBudget::ms duration) {
    return format_fixed(static_cast<double>(duration.count()) / 1000, duration.count() % 1000 ? 1 : 0) + " s";
  };
  return usage_text() + "\ntime budget: with these options a rank ends within " + seconds(budget.total(0, backends)) +
         " + " + seconds(budget.link_pair) + " per node, however its peers fail (--timeout " +
         seconds(options.timeout) + " for each wait between ranks" + (options.quick ? ", --quick" : "") + ")\n";
}

}  // namespace ddp::doctor
