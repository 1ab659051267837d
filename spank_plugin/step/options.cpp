#include "spank_plugin/step/options.hpp"

#include <cctype>

#include "base/parse.hpp"
#include "core/error.hpp"

namespace ddp {
namespace {

void apply_ddp(Options& options, std::optional<std::string_view> value) {
  if (value == "off") {
    options.enabled = false;
    return;
  }
  options.enabled = true;
  options.backend.reset();
  if (!value) return;
  options.backend = backend_named(*value);
  if (!options.backend) {
    throw Error("unknown --ddp backend " + quote(*value) + "; use one of " + std::string(kBackendNames) + ", or off");
  }
}

void apply_port(Options& options, std::optional<std::string_view> value) {
  if (!value || *value == "auto") {
    options.master_port.reset();
    return;
  }
  options.master_port = static_cast<uint16_t>(require_uint(*value, 1024, 65535, "--ddp-port value"));
}

void apply_verbose(Options& options, std::optional<std::string_view>) { options.verbose = true; }

std::optional<BindMode> bind_mode_named(std::string_view name) {
  if (name == "closest") return BindMode::Closest;
  if (name == "none") return BindMode::None;
  return std::nullopt;
}

void apply_bind(Options& options, std::optional<std::string_view> value) {
  options.bind = bind_mode_named(value.value_or(""));
  if (!options.bind) throw Error("unknown --ddp-bind mode " + quote(value.value_or("")) + "; use closest or none");
}

// Interface names are at most IFNAMSIZ-1 characters of a safe set; checking here keeps odd text out of messages.
bool is_interface_name(std::string_view name) {
  if (name.empty() || name.size() > 15) return false;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_' && c != ':') return false;
  }
  return true;
}

void apply_nic(Options& options, std::optional<std::string_view> value) {
  if (!value || *value == "auto") {
    options.nic.reset();
    return;
  }
  if (!is_interface_name(*value)) {
    throw Error("--ddp-nic value " + quote(*value) + " is not a network interface name; give one like eth0, or auto");
  }
  options.nic = std::string(*value);
}

void apply_check(Options& options, std::optional<std::string_view>) { options.check = true; }

void apply_keep_going(Options& options, std::optional<std::string_view>) { options.keep_going = true; }

void apply_recover(Options& options, std::optional<std::string_view>) { options.recover = true; }
std::optional<CleanEnv> cleanenv_named(std::string_view name) {
  if (name == "apptainer") return CleanEnv::Apptainer;
  if (name == "singularity") return CleanEnv::Singularity;
  if (name == "off") return CleanEnv::Off;
  return std::nullopt;
}

void apply_cleanenv(Options& options, std::optional<std::string_view> value) {
  options.cleanenv = cleanenv_named(value.value_or(""));
  if (!options.cleanenv) {
    throw Error("unknown --ddp-cleanenv value " + quote(value.value_or("")) +
                "; use apptainer (APPTAINERENV_ names), singularity (SINGULARITYENV_ names) or off");
  }
}

void apply_snapshot_dir(Options& options, std::optional<std::string_view> value) {
  if (!value || value->empty()) throw Error("--ddp-snapshot-dir needs a directory, e.g. /fsx/%u/%j");
  options.snapshot_dir = std::string(*value);
}

void set_port_range(Config& config, std::string_view value) {
  config.port_range = parse_port_range(value, "port_range");
  if (config.port_range.first < 1024) throw Error("port_range starts below 1024");
}

void set_snapshot_dir(Config& config, std::string_view value) {
  if (value.empty() || value[0] != '/') throw Error("not an absolute path");
  config.snapshot_dir = std::string(value);
}

void set_bind(Config& config, std::string_view value) {
  const auto mode = bind_mode_named(value);
  if (!mode) throw Error("unknown bind mode");
  config.bind = *mode;
}

void set_nic(Config& config, std::string_view value) {
  if (value != "auto" && !is_interface_name(value)) throw Error("not an interface name");
  config.nic = value == "auto" ? "" : std::string(value);
}

void set_topology_xml(Config& config, std::string_view value) {
  if (value.empty() || value[0] != '/') throw Error("not an absolute path");
  config.topology_xml = std::string(value);
}

void set_topology_cache(Config& config, std::string_view value) {
  if (value == "none") {
    config.topology_cache.clear();
    return;
  }
  if (value.size() < 2 || value[0] != '/') throw Error("not an absolute path");
  config.topology_cache = std::string(value);
}

void set_snapshot_dir_timeout(Config& config, std::string_view value) {
  config.snapshot_dir_timeout = std::chrono::seconds(require_uint(value, 1, 3600, "snapshot_dir_timeout"));
}

void set_remember_bad_nodes(Config& config, std::string_view value) {
  if (value != "yes" && value != "no") throw Error("not yes or no");
  config.remember_bad_nodes = value == "yes";
}

void set_cleanenv(Config& config, std::string_view value) {
  const auto mode = cleanenv_named(value);
  if (!mode) throw Error("unknown cleanenv mode");
  config.cleanenv = *mode;
}

void set_default_backend(Config& config, std::string_view value) {
  const auto backend = backend_named(value);
  if (!backend) throw Error("unknown backend");
  config.default_backend = *backend;
}

std::string known_keys() {
  std::string names;
  for (const ConfigKey& key : config_key_table()) names += (names.empty() ? "" : ", ") + std::string(key.name);
  return names;
}

}  // namespace

const char* to_string(BindMode mode) { return mode == BindMode::Closest ? "closest" : "none"; }

const char* to_string(CleanEnv mode) {
  return mode == CleanEnv::Apptainer ? "apptainer" : mode == CleanEnv::Singularity ? "singularity" : "off";
}

const char* env_prefix(CleanEnv mode) {
  return mode == CleanEnv::Apptainer ? "APPTAINERENV_" : mode == CleanEnv::Singularity ? "SINGULARITYENV_" : "";
}

const std::vector<ConfigKey>& config_key_table() {
  // {name, default, example where no default, help (docs/admin.md, plugstack.conf.in), accepted (errors), setter}
  static const std::vector<ConfigKey> keys = {
      {"port_range", "20000-29999", nullptr,
       "range for derived ports (`MASTER_PORT`), outside the kernel's ephemeral range "
       "(`net.ipv4.ip_local_port_range`)",
       "FIRST-LAST within 1024-65535, outside the kernel's ephemeral range", set_port_range},
      {"default_backend", "auto", nullptr, "backend hint when `--ddp` is given without one: auto, gloo, nccl or mpi",
       kBackendNames.data(), set_default_backend},
      {"snapshot_dir", nullptr, "/fsx/%u/snapshots/%x-%j",
       "default `--ddp-snapshot-dir` (`DDP_SNAPSHOT_DIR`): %u user, %j job id, %x job name",
       "an absolute path, with %u (user), %j (job id), %x (job name)", set_snapshot_dir},
      {"bind", "closest", nullptr, "default `--ddp-bind`: closest or none", "closest|none", set_bind},
      {"nic", "auto", nullptr, "default `--ddp-nic`: an interface name, or auto", "an interface name, or auto",
       set_nic},
      {"topology_xml", nullptr, "/etc/slurm/node.xml",
       "plan from an hwloc XML export (`lstopo --of xml`) instead of the running system; read first in a child "
       "process, since hwloc crashes on some malformed files",
       "an absolute path to an hwloc XML export (lstopo --of xml)", set_topology_xml},
      {"topology_cache", "/run/slurm-ddp", nullptr,
       "root-owned directory for the per-boot topology export (`none`: probe at every step); keyed by boot id, hwloc "
       "version and device names, written again when cut short",
       "a root-owned directory for the per-boot topology export, or none", set_topology_cache},
      {"snapshot_dir_timeout", "30", nullptr,
       "seconds each task waits for the snapshot directory's file system before the step fails (a hung NFS or "
       "Lustre mount), and srun and each task for the log directory's before going on without reports",
       "seconds each task waits for the snapshot directory's file system, 1-3600 (30)", set_snapshot_dir_timeout},
      {"cleanenv", "off", nullptr,
       "default `--ddp-cleanenv`: `apptainer` where users run `apptainer exec --cleanenv` (the variables also as "
       "`APPTAINERENV_` names), `singularity` for `SINGULARITYENV_` names",
       "apptainer|singularity|off: --ddp-cleanenv's default", set_cleanenv},
      {"remember_bad_nodes", "yes", nullptr,
       "whether `ddp-restart` adds a node that failed a step to the job's `ExcNodeList` when it requeues the job, so "
       "that no later allocation of the job lands there; `no` sets `DDP_REMEMBER_BAD_NODES=0` in `sbatch --ddp` and "
       "`salloc --ddp` jobs",
       "yes|no: whether ddp-restart remembers failed nodes across requeues", set_remember_bad_nodes},
  };
  return keys;
}

const std::vector<OptionSpec>& option_table() {
  static const std::vector<OptionSpec> table = {
      {"ddp", "auto|gloo|nccl|mpi|off",
       "Run the step as PyTorch distributed workers: export RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT... "
       "(the torchrun contract); the value is a backend hint, off disables an inherited #SBATCH --ddp",
       ArgKind::Optional, apply_ddp},
      {"ddp-port", "N|auto",
       "Rendezvous port (MASTER_PORT); auto: Slurm's reserved ports, else one derived from the step id",
       ArgKind::Required, apply_port},
      {"ddp-verbose", nullptr, "Each task prints its DDP environment to stderr, one line", ArgKind::None,
       apply_verbose},
      {"ddp-snapshot-dir", "PATH",
       "Shared directory for training snapshots, exported as DDP_SNAPSHOT_DIR and created (mode 0700) if missing; "
       "%u user, %j job id, %x job name",
       ArgKind::Required, apply_snapshot_dir},
      {"ddp-bind", "closest|none",
       "closest: each task gets its closest GPU, NIC, RDMA device and CPU cores (default); none: no binding",
       ArgKind::Required, apply_bind},
      {"ddp-nic", "NAME|auto",
       "Socket interface for NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME; auto: the closest one "
       "that reaches MASTER_ADDR",
       ArgKind::Required, apply_nic},
      {"ddp-check", nullptr,
       "Check each node (interface, master, GPUs, snapshot directory) before the program "
       "starts; a failed check fails the step with the reason",
       ArgKind::None, apply_check},
      {"ddp-keep-going", nullptr,
       "Keep the step running when a task fails (the default ends it, as --kill-on-bad-exit=1 does: a DDP step "
       "that lost a rank cannot finish)",
       ArgKind::None, apply_keep_going},
      {"ddp-recover", nullptr,
       "Recover in place: a task that fails or stops answering does not end the step; the others go on without it "
       "(exports DDP_RECOVER=in-place, which ddp-train follows as --recover in-place)",
       ArgKind::None, apply_recover},
      {"ddp-cleanenv", "apptainer|singularity|off",
       "Export every DDP variable a second time as APPTAINERENV_NAME (singularity: SINGULARITYENV_NAME), which "
       "apptainer exec --cleanenv passes into the container; off: do not",
       ArgKind::Required, apply_cleanenv},
  };
  return table;
}

std::optional<bool> kill_on_bad_exit(const Options& options) {
  if (!options.enabled) return std::nullopt;
  return !options.keep_going && !options.recover;
}

void apply_option(Options& options, size_t index, const char* optarg) {
  const auto& table = option_table();
  if (index >= table.size()) throw Error("unknown option index " + std::to_string(index));
  // srun passes "" for an optional argument left out; sbatch forwards it to the steps as "(null)".
  const bool left_out = optarg == nullptr || (table[index].arg == ArgKind::Optional &&
                                              (*optarg == '\0' || std::string_view(optarg) == "(null)"));
  table[index].apply(options, left_out ? std::nullopt : std::optional<std::string_view>(optarg));
}

Config parse_config(const std::vector<std::string>& args, std::string_view file) {
  Config config;
  for (const std::string& arg : args) {
    const size_t eq = arg.find('=');
    const std::string_view name = std::string_view(arg).substr(0, eq);
    const auto where = " in " + std::string(file);
    if (eq == std::string::npos) {
      throw Error("plugstack argument " + quote(arg) + where + " is not key=value; known keys: " + known_keys());
    }
    const ConfigKey* key = nullptr;
    for (const ConfigKey& candidate : config_key_table()) {
      if (name == candidate.name) key = &candidate;
    }
    if (key == nullptr) {
      throw Error("plugstack argument " + quote(arg) + where + ": unknown key " + quote(name) +
                  "; known keys: " + known_keys());
    }
    const std::string_view value = std::string_view(arg).substr(eq + 1);
    try {
      key->apply(config, value);
    } catch (const Error&) {
      throw Error("plugstack argument " + quote(arg) + where + ": bad value " + quote(value) + " for " + key->name +
                  "; expected " + key->accepted);
    }
  }
  return config;
}

}  // namespace ddp
