#pragma once
// The torchrun worker contract, in one place: what each task of a --ddp step finds in its environment.
//   per node  plan_step(): validates the step, picks MASTER_ADDR and MASTER_PORT
//   per task  task_env():  a lookup into that plan
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/env.hpp"
#include "spank_plugin/step/options.hpp"
#include "spank_plugin/step/ports.hpp"
#include "spank_plugin/step/step.hpp"

namespace ddp {

struct StepPlan {
  StepInfo step;
  Backend backend = Backend::Auto;
  bool verbose = false;
  std::string master_addr;  // first host of the step's node list
  MasterPort master_port;
  std::string snapshot_dir;            // expanded; empty when neither --ddp-snapshot-dir nor snapshot_dir is set
  bool snapshot_dir_explicit = false;  // from --ddp-snapshot-dir: replaces a DDP_SNAPSHOT_DIR of the environment
  BindMode bind = BindMode::Closest;
  std::optional<std::string> nic;                         // --ddp-nic, else the admin's nic; unset: chosen per task
  std::string topology_xml;                               // the admin's topology_xml; empty: the running system
  std::string topology_cache;                             // the admin's topology_cache; empty: none
  std::chrono::milliseconds snapshot_dir_timeout{30000};  // the admin's snapshot_dir_timeout
  bool check = false;
  bool recover = false;               // --ddp-recover: DDP_RECOVER=in-place
  CleanEnv cleanenv = CleanEnv::Off;  // --ddp-cleanenv, else the admin's cleanenv
};

// Throws ddp::Error for a malformed node list, a bad reserved-port variable or an admin port range that
// overlaps the kernel's ephemeral range (`ephemeral`), where connections would steal the port.
StepPlan plan_step(const StepInfo& step, const Options& options, const Config& config, PortRange ephemeral);

enum class Origin { Plugin, User };

struct EnvVar {
  std::string name;
  std::string value;
  Origin origin;
};

class TaskEnv {
 public:
  // `user`: the task's environment as the user left it.
  explicit TaskEnv(EnvLookup user) : user_(std::move(user)) {}

  // Part of the contract: replaces any value, since a stale RANK from an outer launch must not survive.
  void set(const std::string& name, std::string value);
  // A tuning default: a value the user set explicitly wins and is kept as is.
  void set_default(const std::string& name, std::string value);

  const std::vector<EnvVar>& vars() const { return vars_; }
  std::optional<std::string> value(const std::string& name) const;  // as the task will see it
  std::optional<std::string> user_value(const std::string& name) const { return user_(name); }
  // One line, stable format: "NAME=value ..." with "[user]" after values the user set.
  std::string describe() const;

 private:
  EnvLookup user_;
  std::vector<EnvVar> vars_;
};

TaskEnv task_env(const StepPlan& plan, const TaskInfo& task, EnvLookup user);

// What the task side sets in the task, in order: every variable the plugin chose (the user's own stay as they are),
// DDP_CONTRACT with the values that must reach the program unchanged (container.hpp), then, with --ddp-cleanenv,
// each of those again under the runtime's prefix (APPTAINERENV_NAME), and always APPTAINERENV_DDP_CONTRACT, so
// that a program started with apptainer exec --cleanenv without --ddp-cleanenv can tell what it lost.
std::vector<std::pair<std::string, std::string>> task_exports(const TaskEnv& env, CleanEnv cleanenv);

// The snapshot directory the plugin creates before the tasks start: the one it exports, unless the user's own
// DDP_SNAPSHOT_DIR wins over the admin default (then the runtime checks the user's directory itself).
std::optional<std::string> snapshot_dir_to_prepare(const StepPlan& plan, const EnvLookup& user);

// The --ddp-verbose line of one task; `placement` (binding summary) follows a " | " when not empty.
std::string verbose_line(const StepPlan& plan, const TaskInfo& task, const TaskEnv& env,
                         const std::string& placement = "");

// Per task: TORCHELASTIC_ERROR_FILE and TORCH_NCCL_DEBUG_INFO_TEMP_FILE in `step_dir` (report/step_logs.hpp) when it is
// usable, and always PyTorch's watchdog and flight-recorder settings (TORCH_NCCL_ASYNC_ERROR_HANDLING,
// TORCH_NCCL_DUMP_ON_TIMEOUT, TORCH_NCCL_TRACE_BUFFER_SIZE), each unless the user set it. TORCHELASTIC_ERROR_FILE
// belongs to the contract and replaces an outer launcher's stale value.
void add_failure_reporting(TaskEnv& env, const std::optional<std::string>& step_dir, uint32_t rank,
                           const std::string& host);

}  // namespace ddp
