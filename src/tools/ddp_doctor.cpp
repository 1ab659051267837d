// ddp-doctor: checks a Slurm allocation (or an mpirun, or this node alone) before training, and says what is
// wrong in words a user can act on. Exit status: 0 passed, 1 a check failed, 2 bad usage.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>

#include "doctor/gloo_allreduce.hpp"
#include "doctor/session.hpp"
#include "doctor/tcp_transport.hpp"
#include "doctor/topology_check.hpp"
#include "error.hpp"
#ifdef DDP_DOCTOR_HAVE_MPI
#include "doctor/mpi_transport.hpp"
#endif
#ifdef DDP_DOCTOR_HAVE_NCCL
#include "doctor/nccl_allreduce.hpp"
#endif

using namespace ddp::doctor;

namespace {

std::optional<std::string> from_environment(const std::string& name) {
  const char* value = std::getenv(name.c_str());
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

std::string this_host() {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  return name;
}

void print(const Outcome& outcome, bool json) {
  if (json) {
    std::cout << format_json(outcome.report);
  } else {
    std::cout << format_table(outcome.report) << format_summary(outcome.report) << "\n";
  }
  std::cout.flush();
}

std::unique_ptr<Transport> open_transport(const Launch& launch, const DoctorOptions& options, int* argc,
                                          char*** argv, std::vector<CheckResult>& meeting) {
  switch (launch.kind) {
    case LaunchKind::Single:
      return make_solo_transport();
    case LaunchKind::Env: {
      TcpExchangeSettings settings{launch.master_addr, *launch.master_port, launch.rank, launch.world_size,
                                   launch.session, options.timeout};
      auto transport = open_tcp_exchange(settings);
      meeting = tcp_meeting_results(*transport, launch, options.timeout);
      return transport;
    }
    case LaunchKind::Mpi: {
#ifdef DDP_DOCTOR_HAVE_MPI
      auto transport = open_mpi_exchange(argc, argv);
      meeting = probe_master_port(*transport, launch, options.timeout);
      return transport;
#else
      (void)argc;
      (void)argv;
      throw ddp::Error("started by mpirun, but this ddp-doctor was built without MPI; install libopenmpi-dev and "
                       "rebuild, or start it with srun --ddp");
#endif
    }
  }
  return make_solo_transport();
}

}  // namespace

int main(int argc, char** argv) {
  DoctorRun run;
  run.env = from_environment;
  try {
    run.options = parse_doctor_options(std::vector<std::string>(argv + 1, argv + argc));
    if (run.options.help) {
      std::cout << doctor_usage();
      return 0;
    }
    run.launch = detect_launch(run.env, run.options);
  } catch (const ddp::Error& e) {
    std::cerr << "ddp-doctor: " << e.what() << "\n";
    return 2;
  }
  run.host = this_host();
  run.progress = [](const std::string& step) { std::cerr << "ddp-doctor: " << step << std::endl; };
  run.topology_checks = topology_checks;
  const auto gloo = make_gloo_backend();
  run.backends.push_back(gloo.get());
#ifdef DDP_DOCTOR_HAVE_NCCL
  const auto nccl = make_nccl_backend();
  run.backends.push_back(nccl.get());
#endif

  std::vector<CheckResult> meeting;
  std::unique_ptr<Transport> transport;
  try {
    transport = open_transport(run.launch, run.options, &argc, &argv, meeting);
  } catch (const ddp::Error& e) {
    std::cerr << "ddp-doctor: " << e.what() << "\n";
    return 2;
  } catch (const ExchangeError& e) {
    const Outcome alone = run_unconnected(run, e.what());
    print(alone, run.options.json);
    return alone.exit_status;
  }
  const Outcome outcome = run_doctor(*transport, run, std::move(meeting));
  if (outcome.print) print(outcome, run.options.json);
  // Only now: under MPI, a run that lost a rank ends with MPI_Abort here.
  transport.reset();
  return outcome.exit_status;
}
