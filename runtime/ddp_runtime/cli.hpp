#pragma once
// ddp-train's command line, modelled on the seed script (`multigpu_torchrun.py total_epochs save_every
// --batch_size N`). Plain C++: no LibTorch here.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "backend.hpp"
#include "env.hpp"

namespace ddp::runtime {

enum class WorkloadKind { Seed, Mlp, FashionMnist };

// DDP's gradient buckets: bucket_cap_mb=25, and a first bucket of at most 1 MiB (dist._DEFAULT_FIRST_BUCKET_BYTES).
inline constexpr double kBucketCapMb = 25.0;
inline constexpr int64_t kFirstBucketBytes = int64_t{1} << 20;

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
  std::string run_id;        // --run-id, else SLURM_JOB_ID, else TORCHELASTIC_RUN_ID (outside Slurm), else "default"
  double snapshot_every_seconds = 0.0;  // 0: off
  int keep = 3;
  std::string resume;  // a snapshot file to start from instead of the newest in snapshot_dir
  std::string output = "finalmodel.pt";
  std::optional<Backend> backend;   // overrides DDP_BACKEND
  double timeout_seconds = 1800.0;  // PyTorch's default process-group timeout
  double bucket_cap_mb = kBucketCapMb;
  bool help = false;
};

// Throws ddp::Error with a one-line message naming the bad value and the fix.
TrainOptions parse_train_args(const std::vector<std::string>& args, const EnvLookup& env);

const char* train_usage();
const char* to_string(WorkloadKind workload);

}  // namespace ddp::runtime
