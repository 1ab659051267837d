#pragma once
// ddp-train's command line, modelled on the seed script (`multigpu_torchrun.py total_epochs save_every
// --batch_size N`). Plain C++: no LibTorch here.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ddp_runtime/launch.hpp"

namespace ddp::runtime {

enum class WorkloadKind { Seed, Mlp, FashionMnist };

struct TrainOptions {
  int total_epochs = 0;
  int save_every = 0;  // 0: no snapshots at epoch ends
  int batch_size = 32;
  WorkloadKind workload = WorkloadKind::Seed;
  int width = 1024;
  int64_t samples = 2048;
  std::string data_dir;
  double lr = 1e-3;
  double momentum = 0.0;
  int accumulate = 1;
  uint64_t seed = 0;
  std::string snapshot_dir;  // --snapshot-dir, else DDP_SNAPSHOT_DIR, else the working directory (the seed's)
  double snapshot_every_seconds = 0.0;  // 0: off
  int keep = 3;
  std::string resume;  // a snapshot file to start from instead of the newest in snapshot_dir
  std::string output = "finalmodel.pt";
  std::optional<BackendHint> backend;  // overrides DDP_BACKEND
  double timeout_seconds = 1800.0;     // PyTorch's default process-group timeout
  double bucket_cap_mb = 25.0;         // DDP's bucket_cap_mb
  double straggler_threshold_pct = 20.0;  // straggler.hpp: ranks slower than the median by more are named
  bool json = false;                      // rank 0 also prints each epoch's per-rank scores as a JSON line
  bool help = false;
};

// Throws ddp::Error with a one-line message naming the bad value and the fix.
TrainOptions parse_train_args(const std::vector<std::string>& args, const EnvLookup& env);

const char* train_usage();
const char* to_string(WorkloadKind workload);

}  // namespace ddp::runtime
