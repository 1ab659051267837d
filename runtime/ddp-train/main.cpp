// ddp-train: distributed data-parallel training in C++, launched like a torchrun script (see --help).
#include <cstdio>
#include <string>
#include <vector>

#include "ddp_runtime/cli.hpp"
#include "ddp_runtime/error_message.hpp"
#include "ddp_runtime/launch.hpp"
#include "ddp_runtime/trainer.hpp"
#include "error.hpp"

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
    std::fprintf(stderr, "ddp-train: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddp-train: %s\n", error_message(e).c_str());
    return 1;
  }
}
