// ddp-doctor: checks a Slurm allocation (or an mpirun, or this node alone) before training, and says what is
// wrong in words a user can act on. Exit status: 0 passed, 1 a check failed, 2 bad usage.
#include <iostream>
#include <map>

#include "core/container.hpp"
#include "core/env_names.hpp"
#include "core/error.hpp"
#include "core/netif.hpp"
#include "doctor/checks/catalogue.hpp"
#include "doctor/run/gloo.hpp"
#include "doctor/run/session.hpp"
#include "doctor/run/topology_check.hpp"
#ifdef DDP_DOCTOR_HAVE_NCCL
#include "doctor/run/nccl_allreduce.hpp"
#endif

using namespace ddp::doctor;

namespace {

void print(const Outcome& outcome, bool json) {
  if (json) {
    std::cout << format_json(outcome.report);
  } else {
    std::cout << format_table(outcome.report) << format_summary(outcome.report) << "\n";
  }
  std::cout.flush();
}

// The environment, with --master-addr and --master-port in place of MASTER_ADDR and MASTER_PORT. They replace the
// values srun --ddp set on purpose: DDP_CONTRACT (container.hpp) holds them too, so that only the values nobody
// asked to change are compared with what srun --ddp set.
ddp::EnvLookup environment(const DoctorOptions& options) {
  std::map<std::string, std::string> overrides;
  if (options.master_addr) overrides[ddp::vars::kMasterAddr] = *options.master_addr;
  if (options.master_port) overrides[ddp::vars::kMasterPort] = std::to_string(*options.master_port);
  const ddp::EnvLookup process = ddp::process_environment();
  if (const auto contract = process(ddp::kContractVariable); contract && !overrides.empty()) {
    ddp::ContractValues values = ddp::decode_contract(*contract);
    for (auto& [name, value] : values) {
      if (overrides.count(name) != 0) value = overrides[name];
    }
    overrides[ddp::kContractVariable] = ddp::encode_contract(values);
  }
  return ddp::env_with(std::move(overrides), process);
}

}  // namespace

int main(int argc, char** argv) {
  const auto gloo = make_gloo_backend();
  DoctorRun run;
  run.backends.push_back(gloo.get());
#ifdef DDP_DOCTOR_HAVE_NCCL
  const auto nccl = make_nccl_backend();
  run.backends.push_back(nccl.get());
#endif
  try {
    run.options = parse_doctor_options(std::vector<std::string>(argv + 1, argv + argc));
    if (run.options.help) {
      std::cout << doctor_usage(run.options, run.backends.size());
      return 0;
    }
    if (run.options.list_checks) {
      std::cout << catalogue_text();
      return 0;
    }
    run.env = environment(run.options);
    run.launch = ddp::launch_from_environment(run.env);
  } catch (const ddp::Error& e) {
    std::cerr << "ddp-doctor: " << e.what() << "\n";
    return 2;
  }
  run.host = ddp::host_name();
  run.progress = [](const std::string& step) { std::cerr << "ddp-doctor: " << step << std::endl; };
  run.topology_checks = topology_checks;
  MasterSharer share;
#ifdef DDP_DOCTOR_HAVE_MPI
  share = share_master_over_mpi;
#endif
  Meeting meeting;
  try {
    meeting = meet(run.launch, time_budget(run.options), share);
  } catch (const std::exception& e) {
    const Outcome alone = run_unconnected(run, e.what());
    print(alone, run.options.json);
    return alone.exit_status;
  }
  run.launch = meeting.launch;
  const Outcome outcome = run_doctor(*meeting.group, run, std::move(meeting.results));
  if (outcome.print) print(outcome, run.options.json);
  return outcome.exit_status;
}
