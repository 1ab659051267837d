// libFuzzer target: ddp-train's command line and environment. Lines before the first empty line are arguments,
// lines after it NAME=VALUE variables. Anything is accepted with sane values or refused with ddp::Error.
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/launch.hpp"
#include "ddp_runtime/options/cli.hpp"
#include "ddp_runtime/snapshots/snapshot_files.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args;
  std::map<std::string, std::string> vars;
  bool in_env = false;
  std::string line;
  for (size_t i = 0; i <= size; ++i) {
    if (i < size && data[i] != '\n') {
      line += static_cast<char>(data[i]);
      continue;
    }
    if (!in_env && line.empty()) {
      in_env = true;
    } else if (!in_env) {
      args.push_back(line);
    } else if (const size_t eq = line.find('='); eq != std::string::npos) {
      vars[line.substr(0, eq)] = line.substr(eq + 1);
    }
    line.clear();
  }
  const ddp::EnvLookup env = [&vars](const std::string& name) -> std::optional<std::string> {
    const auto found = vars.find(name);
    if (found == vars.end()) return std::nullopt;
    return found->second;
  };
  try {
    const ddp::runtime::ParsedTrainArgs parsed = ddp::runtime::parse_train_args(args, env);
    const ddp::runtime::TrainOptions& options = parsed.options;
    if (!parsed.help && (options.total_epochs < 1 || options.batch_size < 1 || options.keep < 1 ||
                         !ddp::runtime::is_valid_run_id(options.run_id) || options.snapshot_dir.empty())) {
      std::abort();
    }
  } catch (const ddp::Error&) {
  }
  try {
    const ddp::Launch launch = ddp::launch_from_environment(env);
    if (launch.rank < 0 || launch.rank >= launch.world_size || launch.local_rank >= launch.local_world_size)
      std::abort();
  } catch (const ddp::Error&) {
  }
  return 0;
}
