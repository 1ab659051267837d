#pragma once
// ddp-train's options as a typed config, separate from how they are parsed (ddp-train --help lists them): what
// train_main hands to the job factory (train.hpp) and what the runtime's optimizer and trainer read. Plain C++: no
// LibTorch here.
#include <cstdint>
#include <optional>
#include <string>

#include "core/backend.hpp"

namespace ddp::runtime {

enum class WorkloadKind { Seed, Mlp, FashionMnist };
enum class LossKind { MeanSquaredError, CrossEntropy, NegativeLogLikelihood };
enum class OptimizerKind { Sgd, AdamW };
enum class LrSchedule { Constant, Step, Cosine };
// none: a failed or silent peer ends the run (a restart resumes from a snapshot); in-place: the others go on
// without it (docs/runtime.md, recovery in place).
enum class RecoverMode { None, InPlace };

// torch.optim's SGD and AdamW, gradient clipping and the learning-rate schedule (--lr-schedule).
struct OptimizerOptions {
  OptimizerKind kind = OptimizerKind::Sgd;
  double lr = 1e-3;
  double momentum = 0.0;               // SGD
  std::optional<double> weight_decay;  // default: torch.optim's, 0 for SGD and 0.01 for AdamW
  double beta1 = 0.9;                  // AdamW's betas and eps
  double beta2 = 0.999;
  double eps = 1e-8;
  double clip_grad_norm = 0.0;  // torch.nn.utils.clip_grad_norm_'s max_norm; 0: off
  LrSchedule schedule = LrSchedule::Constant;
  int step_epochs = 10;  // step: lr * gamma every step_epochs epochs
  double gamma = 0.1;
  int64_t warmup_steps = 0;  // cosine: linear warm-up over this many optimizer steps

  double decay() const { return weight_decay.value_or(kind == OptimizerKind::AdamW ? 0.01 : 0.0); }
};

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
  std::string model;             // --model: a TorchScript file; the workload is then the model on --data
  std::string data;              // fashion-mnist: a directory; --model: data files, comma-separated
  std::optional<LossKind> loss;  // default: the workload's (--model: cross-entropy for class labels, else mse)
  OptimizerOptions optimizer;
  int accumulate = 1;
  uint64_t seed = 0;
  std::string snapshot_dir;  // --snapshot-dir, else DDP_SNAPSHOT_DIR, else the working directory (the seed's)
  std::string run_id;        // --run-id, else SLURM_JOB_ID, else TORCHELASTIC_RUN_ID (outside Slurm), else "default"
  double snapshot_every_seconds = 0.0;  // 0: off
  int keep = 3;
  std::string resume;  // a snapshot file to start from instead of the newest in snapshot_dir
  std::string output = "finalmodel.pt";
  std::string output_script;        // --model: the trained TorchScript module (default: from --output, *.script.pt)
  std::optional<Backend> backend;   // overrides DDP_BACKEND
  double timeout_seconds = 1800.0;  // PyTorch's default process-group timeout
  double bucket_cap_mb = kBucketCapMb;
  double straggler_threshold_pct = 20.0;    // ranks slower than the median by more are named
  bool json = false;                        // rank 0 also prints each epoch's per-rank scores as a JSON line
  RecoverMode recover = RecoverMode::None;  // --recover, else DDP_RECOVER (srun --ddp-recover sets it)
  int min_ranks = 1;                        // in place: fewer ranks fall back to a restart from a snapshot
  bool join = false;                        // --join (DDP_JOIN=1): a replacement that joins the running group
};

const char* to_string(WorkloadKind workload);
const char* to_string(LossKind loss);
const char* to_string(OptimizerKind optimizer);
const char* to_string(LrSchedule schedule);
const char* to_string(RecoverMode mode);

}  // namespace ddp::runtime
