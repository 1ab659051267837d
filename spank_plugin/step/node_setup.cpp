#include "spank_plugin/step/node_setup.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/child_process.hpp"
#include "base/parse.hpp"
#include "core/env_names.hpp"
#include "core/error.hpp"
#include "doctor/checks/node_checks.hpp"
#include "topology/id_list.hpp"
#include "topology/topology_cache.hpp"

namespace ddp {
namespace {

void restrict_to_step_cores(NodeSetup& node, const std::string& step_cores) {
  if (step_cores.empty()) {
    node.allowed_cpus_note = "Slurm gave no core list";
    return;
  }
  try {
    node.allowed_cpus = cpus_of_cores(*node.hardware, parse_id_list(step_cores, "S_STEP_ALLOC_CORES"));
  } catch (const Error& e) {
    // Slurm's node definition claims cores hwloc does not see (e.g. config_overrides): the task's own affinity,
    // which apply_cpu_binding respects, is then the only limit.
    node.allowed_cpus_note = e.what();
  }
}

// hwloc's XML import is not safe on malformed files (hwloc 2.9 and 2.12 crash on a misspelt attribute: found by
// tests/fuzz/hwloc_xml_fuzz). The admin's topology_xml is trusted, but a typo there must fail the steps with a line
// saying so, not crash slurmstepd: a child process reads it first.
// A file that hangs (on a stuck NFS mount, or a FIFO) costs the step `deadline`, not slurmstepd its life.
void check_loads_safely(const std::string& xml, std::chrono::milliseconds deadline) {
  const ChildOutcome outcome = run_in_child(
      [&]() -> std::string {
        try {
          load_node_hardware(xml);
        } catch (...) {
        }
        return "";
      },
      deadline, 0, "cannot check topology_xml " + quote(xml));
  if (outcome.end == ChildOutcome::End::TimedOut) {
    throw Error("topology_xml " + quote(xml) + " in plugstack.conf could not be read within " + seconds_text(deadline) +
                ": its file system hangs, or it is not a regular file");
  }
  // The child answers whatever the load threw; a crash is a signal, or under a sanitizer its report's exit status.
  if (outcome.end == ChildOutcome::End::Died) {
    throw Error("topology_xml " + quote(xml) + " in plugstack.conf crashes hwloc (" + outcome.death +
                "): it is not an export hwloc can read; write it again with "
                "'lstopo-no-graphics --of xml FILE'");
  }
}

NodeHardware load_hardware(const StepPlan& plan, std::chrono::milliseconds deadline) {
  if (!plan.topology_xml.empty()) {
    check_loads_safely(plan.topology_xml, deadline);
    return load_node_hardware(plan.topology_xml);
  }
  if (plan.topology_cache.empty()) return load_this_system(deadline);
  if (const auto cached = trusted_topology_cache(plan.topology_cache)) {
    try {
      return load_system_hardware_from(*cached);
    } catch (const Error&) {
      // A damaged cache costs only speed: probe the system as if there were none.
    }
  }
  return load_this_system(deadline);
}

void export_binding(TaskEnv& env, const EnvPairs& pairs) {
  const bool gres_gpus = env.user_value("SLURM_STEP_GPUS").has_value();
  for (const auto& [name, value] : pairs) {
    const bool slurms = name == "CUDA_VISIBLE_DEVICES" || name == "CUDA_DEVICE_ORDER" || name == "ROCR_VISIBLE_DEVICES";
    if (gres_gpus && slurms) {
      env.set(name, value);
    } else {
      env.set_default(name, value);
    }
  }
}

std::string gpu_summary(const NodeHardware& hw, const TaskPlacement& placement) {
  std::string text = "gpu=none";
  if (placement.gpu) {
    text = "gpu=cuda:" + std::to_string(placement.cuda_index) + "(" + hw.gpus[*placement.gpu].pci_bus_id + ")";
  }
  if (placement.nic) {
    text += " nic=" + hw.nets[*placement.nic].name + "(" + to_string(*placement.nic_closeness) + ")";
  }
  if (placement.hca) {
    text += " hca=" + hw.rdma[*placement.hca].name + "(" + to_string(*placement.hca_closeness) + ")";
  }
  return text;
}

// Which rule of binding.hpp decided the task's GPU and CPUs, and what it could not do.
std::string rule_summary(const TaskPlacement& placement) {
  std::string text = " why(";
  if (placement.gpu) text += "gpu: " + placement.gpu_rule + "; ";
  text += "cpus: " + placement.cpu_rule + ")";
  if (!placement.note.empty()) text += " note(" + placement.note + ")";
  return text;
}

std::string join_results(const std::vector<doctor::CheckResult>& results, doctor::Status status) {
  std::string line;
  for (const doctor::CheckResult& result : results) {
    if (result.status != status) continue;
    line += (line.empty() ? "" : "; ") + result.check + ": " + result.value;
    if (!result.detail.empty()) line += " (" + result.detail + ")";
  }
  return line;
}

}  // namespace

NodeSetup setup_node(const StepPlan& plan, const std::string& master_ip, const std::string& step_cores,
                     std::chrono::milliseconds deadline) {
  NodeSetup node;
  node.network = read_network(master_ip);
  if (plan.bind == BindMode::None) return node;
  try {
    node.hardware = load_hardware(plan, deadline);
  } catch (const Error& e) {
    throw Error(std::string(e.what()) + "; run the step with --ddp-bind=none to skip topology binding");
  }
  restrict_to_step_cores(node, step_cores);
  return node;
}

std::optional<std::string> topology_cache_to_fill(const Options& options, const Config& config) {
  if (!options.enabled || options.bind.value_or(config.bind) != BindMode::Closest || !config.topology_xml.empty() ||
      config.topology_cache.empty()) {
    return std::nullopt;
  }
  return config.topology_cache;
}

TaskBinding bind_task(const NodeSetup& node, const StepPlan& plan, const TaskInfo& task, TaskEnv& env) {
  const bool multi_node = plan.step.num_nodes > 1;
  TaskBinding binding;
  if (!node.hardware) {
    const SocketInterface socket = choose_socket_interface(node.network, std::nullopt, plan.nic, multi_node);
    export_binding(env, {{vars::kNcclSocketIfname, socket.name}, {vars::kGlooSocketIfname, socket.name}});
    binding.summary = "bind=none socket=" + socket.name + "(" + to_string(socket.reason) + ")";
    return binding;
  }
  const NodeHardware& hw = *node.hardware;
  const std::string visible = visible_devices_variable(hw.gpu_vendor.value_or(GpuVendor::Nvidia));
  const GpuAllocation gpus =
      gpu_allocation_from_slurm(env.user_value("SLURM_STEP_GPUS"), env.user_value(visible), visible);
  const NodePlan node_plan = plan_node(hw, PlanRequest{plan.step.local_tasks, gpus, node.allowed_cpus});
  const TaskPlacement& placement = node_plan.tasks.at(task.local_rank);
  std::optional<std::string> closest_nic;
  if (placement.nic) closest_nic = hw.nets[*placement.nic].name;
  const SocketInterface socket = choose_socket_interface(node.network, closest_nic, plan.nic, multi_node);
  export_binding(env, binding_env(node_plan, task.local_rank, socket.name));
  // A topology read from a file describes another machine: its CPU ids mean nothing here.
  if (hw.this_system) binding.cpus = placement.cpus;
  binding.summary = gpu_summary(hw, placement) + " cpus=" + format_id_list(placement.cpus) +
                    (hw.this_system ? "" : "(not bound: topology from " + hw.source + ")") + " socket=" + socket.name +
                    "(" + to_string(socket.reason) + ")";
  binding.summary += rule_summary(placement);
  if (!node.allowed_cpus_note.empty()) binding.summary += " step-cores-unknown(" + node.allowed_cpus_note + ")";
  return binding;
}

CheckOutcome check_node(const StepPlan& plan, const TaskEnv& env) {
  doctor::NodeCheckRequest request;
  request.master_addr = plan.master_addr;
  request.interface = env.value(vars::kGlooSocketIfname);
  request.env = [&env](const std::string& name) {
    const auto exported = env.value(name);
    return exported ? exported : env.user_value(name);
  };
  request.snapshot_dir = env.value(vars::kSnapshotDir).value_or(env.user_value(vars::kSnapshotDir).value_or(""));
  request.needs_gpu = plan.backend == Backend::Nccl;
  const std::vector<doctor::CheckResult> results = doctor::run_node_checks(request);
  CheckOutcome outcome;
  outcome.failures = join_results(results, doctor::Status::Fail);
  outcome.warnings = join_results(results, doctor::Status::Warn);
  for (const doctor::CheckResult& result : results) outcome.passed += result.status == doctor::Status::Ok;
  return outcome;
}

}  // namespace ddp
