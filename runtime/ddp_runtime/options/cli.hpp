#pragma once
// ddp-train's command line, modelled on the seed script (`multigpu_torchrun.py total_epochs save_every
// --batch_size N`): one table of options (command_line.hpp) that makes both the parser and the usage text.
#include <string>
#include <vector>

#include "core/env.hpp"
#include "ddp_runtime/train_options.hpp"

namespace ddp::runtime {

struct ParsedTrainArgs {
  TrainOptions options;
  bool help = false;  // -h or --help: print train_usage() and do nothing else
};

// Options and positionals, then the environment's defaults (DDP_SNAPSHOT_DIR, DDP_RECOVER, DDP_JOIN, the run id).
// Throws ddp::Error with a one-line message naming the bad value and the fix.
ParsedTrainArgs parse_train_args(const std::vector<std::string>& args, const EnvLookup& env);

std::string train_usage();

}  // namespace ddp::runtime
