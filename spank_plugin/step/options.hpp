#pragma once
// The user's --ddp* options and the admin's plugstack.conf arguments: one table each, so adding an option
// or a key is one entry. The SPANK adapter registers every entry of option_table() and forwards values here.
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/backend.hpp"
#include "spank_plugin/step/ports.hpp"

namespace ddp {

// closest: each task gets its closest GPU, NIC, HCA and cores (binding.hpp); none: no GPU or CPU binding, the
// socket interface is still chosen, since connectivity does not depend on placement.
enum class BindMode { Closest, None };
const char* to_string(BindMode mode);

// apptainer (singularity): every variable srun --ddp sets reaches the task a second time as APPTAINERENV_NAME
// (SINGULARITYENV_NAME), the spelling apptainer (SingularityCE's singularity) exec --cleanenv passes into its
// container as NAME; off: not. One prefix at a time: apptainer says so once per variable when it finds the other.
enum class CleanEnv { Off, Apptainer, Singularity };
const char* to_string(CleanEnv mode);
// "APPTAINERENV_", "SINGULARITYENV_"; "" for Off.
const char* env_prefix(CleanEnv mode);

struct Options {
  bool enabled = false;                 // --ddp given (and not --ddp=off)
  std::optional<Backend> backend;       // unset: the admin's default_backend
  std::optional<uint16_t> master_port;  // --ddp-port; unset: reserved or hashed port
  bool verbose = false;
  std::optional<std::string> snapshot_dir;  // unset: the admin's snapshot_dir, if any
  std::optional<BindMode> bind;             // unset: the admin's bind
  std::optional<std::string> nic;           // unset or "auto": the admin's nic, else chosen per task
  bool check = false;                       // --ddp-check: node checks before the program starts
  bool keep_going = false;                  // --ddp-keep-going: a failed task does not end the step
  bool recover = false;                     // --ddp-recover: the tasks recover in place; a failed one ends nothing
  std::optional<CleanEnv> cleanenv;         // unset: the admin's cleanenv
};

enum class ArgKind { None, Required, Optional };

struct OptionSpec {
  const char* name;      // without the leading "--"
  const char* arg_info;  // shown by srun --help, e.g. "auto|gloo|nccl|mpi|off"
  const char* usage;
  ArgKind arg;
  void (*apply)(Options& options, std::optional<std::string_view> value);
};

const std::vector<OptionSpec>& option_table();

// srun's --kill-on-bad-exit for a step whose user chose none (no --kill-on-bad-exit, no SLURM_KILL_BAD_EXIT): true
// for --ddp steps, since a DDP step that lost a rank can never finish and its other ranks would wait in the next
// collective until PyTorch's timeout (30 minutes); false with --ddp-keep-going, and with --ddp-recover, whose ranks go
// on without the failed one (and would otherwise get SIGTERM, then SIGKILL: Slurm 26.05, and srun -K on every
// version); nullopt (slurm.conf's KillOnBadExit applies) for steps without --ddp.
std::optional<bool> kill_on_bad_exit(const Options& options);

// Applies option `index` of option_table(). An optional argument left out arrives as null, as "" (srun) or as
// the text "(null)" (sbatch, forwarded to the steps): all mean "no value". Throws ddp::Error.
void apply_option(Options& options, size_t index, const char* optarg);

struct Config {
  PortRange port_range{20000, 29999};
  Backend default_backend = Backend::Auto;
  std::string snapshot_dir;  // template with %u %j %x; empty: none
  BindMode bind = BindMode::Closest;
  std::string nic;           // empty: chosen per task
  std::string topology_xml;  // hwloc XML read instead of the running system; empty: the running system
  std::string topology_cache = "/run/slurm-ddp";          // per-boot export of the system's topology; empty: none
  std::chrono::milliseconds snapshot_dir_timeout{30000};  // each wait for the snapshot or log directory
  CleanEnv cleanenv = CleanEnv::Off;                      // --ddp-cleanenv's default
  bool remember_bad_nodes = true;  // ddp-restart leaves a node that failed a step out of the job's later allocations
};

// One plugstack.conf key. config_key_table() is the only list of them: parse_config reads it, and
// spank_plugin/plugstack.conf.in's comment and docs/admin.md's table are written from it (tests/core's
// plugstack_keys_test.cpp fails, naming the key, when either says otherwise, and rewrites both when run with
// DDP_UPDATE_TABLES=1). Adding a key is one row here, its setter, and that test run.
struct ConfigKey {
  const char* name;
  const char* default_value;  // as an admin would write it, and what Config{} holds; nullptr: none
  const char* example;        // a value plugstack.conf.in shows for a key without default; nullptr for the others
  const char* help;           // one sentence, markdown: docs/admin.md's Meaning and plugstack.conf.in's comment
  const char* accepted;       // what parse_config's error says the key takes
  void (*apply)(Config& config, std::string_view value);  // returns normally only for a good value
};

const std::vector<ConfigKey>& config_key_table();

// Strict parse of the plugstack.conf arguments: an unknown key, a missing '=' or a bad value throws
// ddp::Error naming the argument, the file and the accepted values.
Config parse_config(const std::vector<std::string>& args, std::string_view file);

}  // namespace ddp
