// ddp-train: distributed data-parallel training in C++, launched like a torchrun script (see --help).
#include <cstdio>
#include <string>
#include <vector>

#include "ddp_runtime/cli.hpp"
#include "ddp_runtime/error_message.hpp"
#include "ddp_runtime/failure_report.hpp"
#include "ddp_runtime/launch.hpp"
#include "ddp_runtime/mpi_bootstrap.hpp"
#include "ddp_runtime/trainer.hpp"
#include "error.hpp"

namespace {

// With the MPI group, the other ranks would wait in their next collective: the job ends here. The error also goes
// to TORCHELASTIC_ERROR_FILE, where ddp-why and srun --ddp find it.
int fail(int status, const std::string& message) {
  std::fprintf(stderr, "ddp-train: %s\n", message.c_str());
  std::string why;
  if (!ddp::runtime::write_error_report(message, status, ddp::runtime::process_environment(), &why)) {
    std::fprintf(stderr, "ddp-train: warning: %s\n", why.c_str());
  }
  std::fflush(stderr);
  ddp::runtime::abort_mpi_job(status);
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ddp::runtime;
  try {
    const EnvLookup env = process_environment();
    const TrainOptions options = parse_train_args(std::vector<std::string>(argv + 1, argv + argc), env);
    if (options.help) {
      std::fputs(train_usage(), stdout);
      return 0;
    }
    return run_training(options, launch_from_environment(env));
  } catch (const ddp::Error& e) {
    return fail(2, e.what());
  } catch (const std::exception& e) {
    return fail(1, error_message(e));
  }
}
