#include "spank_plugin/step/task_env.hpp"

#include <algorithm>

#include "base/hostlist.hpp"
#include "core/container.hpp"
#include "core/env_names.hpp"
#include "core/error.hpp"
#include "core/snapshot_dir.hpp"
#include "report/step_logs.hpp"

namespace ddp {
namespace {

std::string first_host(const std::string& node_list) {
  if (node_list.empty()) {
    throw Error("SLURM_STEP_NODELIST is not set in the step's environment; --ddp needs a Slurm step launched by srun");
  }
  return Hostlist::parse(node_list).at(0);
}

void check_port_range(const PortRange& range, const PortRange& ephemeral) {
  if (range.overlaps(ephemeral)) {
    throw Error("port_range=" + range.text() + " in plugstack.conf overlaps the kernel's ephemeral port range " +
                ephemeral.text() + " (net.ipv4.ip_local_port_range); choose a port_range outside it, e.g. 20000-29999");
  }
}

}  // namespace

StepPlan plan_step(const StepInfo& step, const Options& options, const Config& config, PortRange ephemeral) {
  validate(step);
  StepPlan plan;
  plan.step = step;
  plan.backend = options.backend.value_or(config.default_backend);
  plan.verbose = options.verbose;
  plan.bind = options.bind.value_or(config.bind);
  plan.nic = options.nic;
  if (!plan.nic && !config.nic.empty()) plan.nic = config.nic;
  plan.topology_xml = config.topology_xml;
  plan.topology_cache = config.topology_cache;
  plan.snapshot_dir_timeout = config.snapshot_dir_timeout;
  plan.check = options.check;
  plan.recover = options.recover;
  plan.cleanenv = options.cleanenv.value_or(config.cleanenv);
  plan.master_addr = first_host(step.node_list);
  plan.master_port = choose_master_port(options.master_port, step.reserved_ports, step.job_id, step.step_id,
                                        config.port_range, step.job_key);
  if (plan.master_port.source == PortSource::Hashed) check_port_range(config.port_range, ephemeral);
  const std::string& dir_template = options.snapshot_dir ? *options.snapshot_dir : config.snapshot_dir;
  if (!dir_template.empty()) {
    plan.snapshot_dir = expand_path_template(dir_template, {step.user, std::to_string(step.job_id), step.job_name});
    plan.snapshot_dir_explicit = options.snapshot_dir.has_value();
  }
  return plan;
}

void TaskEnv::set(const std::string& name, std::string value) {
  vars_.push_back({name, std::move(value), Origin::Plugin});
}

void TaskEnv::set_default(const std::string& name, std::string value) {
  if (auto mine = user_(name)) {
    vars_.push_back({name, std::move(*mine), Origin::User});
  } else {
    set(name, std::move(value));
  }
}

std::optional<std::string> TaskEnv::value(const std::string& name) const {
  for (const EnvVar& var : vars_) {
    if (var.name == name) return var.value;
  }
  return std::nullopt;
}

std::string TaskEnv::describe() const {
  std::string line;
  for (const EnvVar& var : vars_) {
    if (!line.empty()) line += ' ';
    // The job's key proves rank 0's store to the ranks: it never goes into output files others may read.
    line += var.name + '=' + (var.name == kJobKeyVariable ? std::string("(secret)") : var.value);
    if (var.origin == Origin::User) line += "[user]";
  }
  return line;
}

TaskEnv task_env(const StepPlan& plan, const TaskInfo& task, EnvLookup user) {
  validate(plan.step, task);
  const StepInfo& step = plan.step;
  const std::string run_id = std::to_string(step.job_id) + "." + std::to_string(step.step_id);
  TaskEnv env(std::move(user));
  env.set(vars::kRank, std::to_string(task.rank));
  env.set(vars::kLocalRank, std::to_string(task.local_rank));
  env.set(vars::kWorldSize, std::to_string(step.num_tasks));
  env.set(vars::kLocalWorldSize, std::to_string(step.local_tasks));
  env.set(vars::kNodeRank, std::to_string(task.node_rank));
  env.set(vars::kGroupRank, std::to_string(task.node_rank));
  env.set(vars::kGroupWorldSize, std::to_string(step.num_nodes));
  env.set(vars::kRoleName, "default");
  env.set(vars::kRoleRank, std::to_string(task.rank));
  env.set(vars::kRoleWorldSize, std::to_string(step.num_tasks));
  env.set(vars::kMasterAddr, plan.master_addr);
  env.set(vars::kMasterPort, std::to_string(plan.master_port.number));
  env.set(vars::kRunId, run_id);
  env.set(vars::kRestartCount, std::to_string(step.restart_count));
  // Also where --export=NONE kept it only under its carrier's name (ports.hpp).
  if (!step.job_key.empty()) env.set(kJobKeyVariable, step.job_key);
  if (!step.job_instance.empty()) env.set(kJobInstanceVariable, step.job_instance);
  env.set(vars::kMaxRestarts, std::to_string(step.max_restarts));
  // No torchrun agent holds a store here: rank 0 must host it, as init_process_group("env://") does by default.
  env.set(vars::kUseAgentStore, "False");
  env.set(vars::kBackend, to_string(plan.backend));
  env.set_default(vars::kOmpNumThreads, std::to_string(step.cpus_per_task));
  // PyTorch 2.4+ asks TCPStore for its libuv server, which torch builds without libuv (Debian's, Ubuntu's) refuse
  // at init_process_group; the classic server, torch's default before 2.4, works with every build.
  env.set_default(vars::kUseLibuv, "0");
  if (plan.recover) env.set(vars::kRecover, "in-place");
  if (plan.snapshot_dir_explicit) {
    env.set(vars::kSnapshotDir, plan.snapshot_dir);
  } else if (!plan.snapshot_dir.empty()) {
    env.set_default(vars::kSnapshotDir, plan.snapshot_dir);
  }
  return env;
}

std::vector<std::pair<std::string, std::string>> task_exports(const TaskEnv& env, CleanEnv cleanenv) {
  std::vector<std::pair<std::string, std::string>> exports;
  ContractValues contract;
  for (const EnvVar& var : env.vars()) {
    if (var.origin == Origin::User) continue;
    exports.emplace_back(var.name, var.value);
    const auto& names = contract_names();
    if (std::find(names.begin(), names.end(), var.name) != names.end()) contract.emplace_back(var.name, var.value);
  }
  const std::string contract_text = encode_contract(contract);
  exports.emplace_back(kContractVariable, contract_text);
  if (cleanenv != CleanEnv::Off) {
    const size_t plugin_values = exports.size();
    for (size_t i = 0; i < plugin_values; ++i) {
      exports.emplace_back(env_prefix(cleanenv) + exports[i].first, exports[i].second);
    }
  }
  if (cleanenv != CleanEnv::Apptainer) exports.emplace_back(kCleanEnvContractVariable, contract_text);
  return exports;
}

std::optional<std::string> snapshot_dir_to_prepare(const StepPlan& plan, const EnvLookup& user) {
  if (plan.snapshot_dir.empty() || (!plan.snapshot_dir_explicit && user(vars::kSnapshotDir))) return std::nullopt;
  return plan.snapshot_dir;
}

std::string verbose_line(const StepPlan& plan, const TaskInfo& task, const TaskEnv& env, const std::string& placement) {
  return "ddp: rank " + std::to_string(task.rank) + " on " + plan.step.hostname + " (port from " +
         to_string(plan.master_port.source) + "): " + env.describe() + (placement.empty() ? "" : " | " + placement);
}

void add_failure_reporting(TaskEnv& env, const std::optional<std::string>& step_dir, uint32_t rank,
                           const std::string& host) {
  if (step_dir) env.set(vars::kErrorFile, *step_dir + "/" + error_file_name(rank, host));
  // A collective that hangs ends the process after its timeout instead of holding the allocation (PyTorch's
  // default since 2.2: tear down without aborting communicators, an abort can hang itself), with the flight
  // recorder's last collectives dumped where ddp-why finds them.
  env.set_default(vars::kNcclAsyncErrorHandling, "3");
  env.set_default(vars::kNcclDumpOnTimeout, "1");
  env.set_default(vars::kNcclTraceBufferSize, "2000");
  if (step_dir) env.set_default(vars::kNcclDebugInfoTempFile, *step_dir + "/" + nccl_dump_prefix(host));
}

}  // namespace ddp
