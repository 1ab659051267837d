#include "doctor/run/doctor_options.hpp"

#include <cmath>
#include <cstdlib>
#include <map>

#include "base/command_line.hpp"
#include "base/parse.hpp"
#include "core/error.hpp"

namespace ddp::doctor {
namespace {

using cli::Bound;
using cli::real;
using Options = DoctorOptions;
using Value = const std::string&;

std::string seconds_text(std::chrono::milliseconds duration) {
  return cli::number_text(static_cast<double>(duration.count()) / 1000);
}

// Each option once: name, value, help, how it sets DoctorOptions, the default the usage shows (from
// DoctorOptions' own initializers) or an example.
const cli::Table<Options>& option_table() {
  static const cli::Table<Options> table = {
      {"--quick", "", "small transfers and writes (seconds), for tests and a first look",
       [](Options& o, Value) { o.quick = true; }},
      {"--json", "", "print the report as JSON instead of a table", [](Options& o, Value) { o.json = true; }},
      {"--snapshot-dir", "DIR", "the snapshot directory to check (default: DDP_SNAPSHOT_DIR)",
       [](Options& o, Value v) { o.snapshot_dir = v; }},
      {"--snapshot-size", "SIZE", "size of one snapshot, like 4G (default: the newest file there, else 1G)",
       [](Options& o, Value v) { o.snapshot_bytes = parse_size(v, "--snapshot-size"); }},
      {"--data-dir", "DIR", "also check the training data's directory (device kind)",
       [](Options& o, Value v) { o.data_dir = v; }},
      {"--interface", "NAME",
       "socket interface to check and test over (default: GLOO_SOCKET_IFNAME,\n"
       "NCCL_SOCKET_IFNAME, else the one whose route reaches MASTER_ADDR)",
       [](Options& o, Value v) { o.interface = v; }},
      {"--master-addr", "HOST", "rank 0's node (default: MASTER_ADDR)", [](Options& o, Value v) { o.master_addr = v; }},
      {"--master-port", "N", "rank 0 listens here (default: MASTER_PORT)",
       [](Options& o, Value v) { o.master_port = cli::whole<uint16_t>(v, 1, 65535); }, nullptr, "29500"},
      {"--timeout", "SECONDS", "longest wait for another rank at any step",
       [](Options& o, Value v) { o.timeout = std::chrono::milliseconds(std::lround(real(v, Bound::Positive) * 1000)); },
       [](const Options& o) { return seconds_text(o.timeout); }},
      {"--workers", "N", "data-loader workers per rank, checked against the rank's cores",
       [](Options& o, Value v) { o.workers = cli::whole<unsigned>(v, 0, 4096); }, nullptr, "8"},
      {"--min-net-gbps", "X", "WARN below this point-to-point bandwidth",
       [](Options& o, Value v) { o.thresholds.min_net_gbps = real(v, Bound::Positive); },
       [](const Options& o) { return cli::number_text(o.thresholds.min_net_gbps); }},
      {"--max-rtt-us", "X", "WARN above this round trip between nodes",
       [](Options& o, Value v) { o.thresholds.max_rtt_us = real(v, Bound::Positive); },
       [](const Options& o) { return cli::number_text(o.thresholds.max_rtt_us); }},
      {"--min-disk-mbps", "X", "WARN below this snapshot write bandwidth",
       [](Options& o, Value v) { o.thresholds.min_disk_mbps = real(v, Bound::Positive); },
       [](const Options& o) { return cli::number_text(o.thresholds.min_disk_mbps); }},
      {"--max-clock-ms", "X", "WARN above this clock offset between nodes",
       [](Options& o, Value v) { o.thresholds.max_clock_ms = real(v, Bound::Positive); },
       [](const Options& o) { return cli::number_text(o.thresholds.max_clock_ms); }},
      {"--straggler-threshold", "P",
       "WARN for a node whose GEMM or memory bandwidth is more than P% below the nodes'\n"
       "median (as ddp-train's)",
       [](Options& o, Value v) { o.thresholds.slow_node_pct = real(v, Bound::Positive); },
       [](const Options& o) { return cli::number_text(o.thresholds.slow_node_pct); }},
      {"--list-checks", "",
       "list every check: its name in the report, where it runs, what it checks and the\n"
       "option that moves its threshold",
       [](Options& o, Value) { o.list_checks = true; }},
  };
  return table;
}

constexpr const char* kUsageIntro = R"(usage: srun --ddp [srun options] ddp-doctor [options]
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

)";

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
  const cli::Arguments found = cli::parse(option_table(), options, args, "ddp-doctor");
  cli::refuse_positionals(found, "ddp-doctor");
  options.help = found.help;
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
  const auto seconds = [](TimeBudget::ms duration) { return seconds_text(duration) + " s"; };
  return kUsageIntro + ("options:\n" + cli::options_text(option_table(), DoctorOptions{})) +
         "\ntime budget: with these options a rank ends within " + seconds(budget.total(0, backends)) + " + " +
         seconds(budget.link_pair) + " per node, however its peers fail (--timeout " + seconds(options.timeout) +
         " for each wait between ranks" + (options.quick ? ", --quick" : "") + ")\n";
}

}  // namespace ddp::doctor
