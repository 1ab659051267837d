#include "ddp_runtime/cli.hpp"

#include <charconv>
#include <cmath>
#include <functional>
#include <map>

#include "ddp_runtime/snapshot_files.hpp"
#include "env_names.hpp"
#include "error.hpp"

namespace ddp::runtime {
namespace {

template <class Int>
Int parse_whole(const std::string& option, const std::string& text, Int minimum, const std::string& example) {
  Int value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || value < minimum) {
    throw Error(option + " '" + text + "' is not a whole number of at least " + std::to_string(minimum) + "; e.g. " +
                option + " " + example);
  }
  return value;
}

enum class Sign { Positive, NonNegative };

double parse_real(const std::string& option, const std::string& text, Sign sign, const std::string& example) {
  std::size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  const bool in_range = sign == Sign::Positive ? value > 0 : value >= 0;
  if (used == 0 || used != text.size() || !std::isfinite(value) || !in_range) {
    throw Error(option + " '" + text + "' is not a " + (sign == Sign::Positive ? "positive" : "non-negative") +
                " number; e.g. " + option + " " + example);
  }
  return value;
}

WorkloadKind parse_workload(const std::string& text) {
  if (text == "seed") return WorkloadKind::Seed;
  if (text == "mlp") return WorkloadKind::Mlp;
  if (text == "fashion-mnist") return WorkloadKind::FashionMnist;
  throw Error("--workload '" + text + "' is not a workload; use seed, mlp or fashion-mnist");
}

std::string checked_run_id(const std::string& where, const std::string& text) {
  if (!is_valid_run_id(text)) {
    throw Error(where + " '" + text +
                "' is not a run id: use 1-64 letters, digits, '.', '_' or '-', not starting "
                "with '.'; e.g. --run-id resnet-a");
  }
  return text;
}

// A run keeps its identity across restarts: Slurm keeps the job id through requeues and ddp-restart's attempts
// (the step id changes), torchrun keeps its rendezvous id. Runs outside both share "default" unless given --run-id.
std::string default_run_id(const EnvLookup& env) {
  if (const auto job = env("SLURM_JOB_ID")) return checked_run_id("SLURM_JOB_ID", *job);
  if (const auto run = env(vars::kRunId); run && is_valid_run_id(*run)) return *run;
  return "default";
}

double positive(const std::string& option, const std::string& text, const std::string& example) {
  return parse_real(option, text, Sign::Positive, example);
}

RecoverMode parse_recover_mode(const std::string& name, const std::string& value) {
  if (value == "none") return RecoverMode::None;
  if (value == "in-place") return RecoverMode::InPlace;
  throw Error(name + " '" + value + "' is not a recovery mode; use none or in-place");
}

double percent(const std::string& text) { return positive("--straggler-threshold", text, "20"); }

LossKind parse_loss(const std::string& text) {
  if (text == "mse") return LossKind::MeanSquaredError;
  if (text == "cross-entropy") return LossKind::CrossEntropy;
  if (text == "nll") return LossKind::NegativeLogLikelihood;
  throw Error("--loss '" + text + "' is not a loss; use mse, cross-entropy or nll");
}

OptimizerKind parse_optimizer(const std::string& text) {
  if (text == "sgd") return OptimizerKind::Sgd;
  if (text == "adamw") return OptimizerKind::AdamW;
  throw Error("--optimizer '" + text + "' is not an optimizer; use sgd or adamw");
}

LrSchedule parse_schedule(const std::string& text) {
  if (text == "constant") return LrSchedule::Constant;
  if (text == "step") return LrSchedule::Step;
  if (text == "cosine") return LrSchedule::Cosine;
  throw Error("--lr-schedule '" + text + "' is not a schedule; use constant, step or cosine");
}

void parse_betas(OptimizerOptions& o, const std::string& text) {
  const std::size_t comma = text.find(',');
  const std::string fix = "; e.g. --betas 0.9,0.999";
  if (comma == std::string::npos) throw Error("--betas '" + text + "' is not two numbers separated by a comma" + fix);
  o.beta1 = parse_real("--betas", text.substr(0, comma), Sign::NonNegative, "0.9,0.999");
  o.beta2 = parse_real("--betas", text.substr(comma + 1), Sign::NonNegative, "0.9,0.999");
  if (o.beta1 >= 1 || o.beta2 >= 1) throw Error("--betas '" + text + "' must both be below 1" + fix);
}

using Setter = std::function<void(TrainOptions&, const std::string&)>;

const std::map<std::string, Setter>& value_options() {
  static const std::map<std::string, Setter> options = {
      {"--batch-size",
       [](TrainOptions& o, const std::string& v) { o.batch_size = parse_whole("--batch-size", v, 1, "32"); }},
      {"--workload", [](TrainOptions& o, const std::string& v) { o.workload = parse_workload(v); }},
      {"--width", [](TrainOptions& o, const std::string& v) { o.width = parse_whole("--width", v, 1, "1024"); }},
      {"--samples",
       [](TrainOptions& o, const std::string& v) { o.samples = parse_whole<int64_t>("--samples", v, 1, "2048"); }},
      {"--model", [](TrainOptions& o, const std::string& v) { o.model = v; }},
      {"--data", [](TrainOptions& o, const std::string& v) { o.data = v; }},
      {"--loss", [](TrainOptions& o, const std::string& v) { o.loss = parse_loss(v); }},
      {"--optimizer", [](TrainOptions& o, const std::string& v) { o.optimizer.kind = parse_optimizer(v); }},
      {"--lr", [](TrainOptions& o,
                  const std::string& v) { o.optimizer.lr = parse_real("--lr", v, Sign::NonNegative, "1e-3"); }},
      {"--momentum",
       [](TrainOptions& o, const std::string& v) {
         o.optimizer.momentum = parse_real("--momentum", v, Sign::NonNegative, "0.9");
       }},
      {"--weight-decay",
       [](TrainOptions& o, const std::string& v) {
         o.optimizer.weight_decay = parse_real("--weight-decay", v, Sign::NonNegative, "0.01");
       }},
      {"--betas", [](TrainOptions& o, const std::string& v) { parse_betas(o.optimizer, v); }},
      {"--eps",
       [](TrainOptions& o, const std::string& v) { o.optimizer.eps = parse_real("--eps", v, Sign::Positive, "1e-8"); }},
      {"--clip-grad-norm",
       [](TrainOptions& o, const std::string& v) {
         o.optimizer.clip_grad_norm = parse_real("--clip-grad-norm", v, Sign::NonNegative, "1.0");
       }},
      {"--lr-schedule", [](TrainOptions& o, const std::string& v) { o.optimizer.schedule = parse_schedule(v); }},
      {"--lr-step-epochs",
       [](TrainOptions& o, const std::string& v) {
         o.optimizer.step_epochs = parse_whole("--lr-step-epochs", v, 1, "10");
       }},
      {"--lr-gamma",
       [](TrainOptions& o, const std::string& v) {
         o.optimizer.gamma = parse_real("--lr-gamma", v, Sign::NonNegative, "0.1");
       }},
      {"--warmup-steps",
       [](TrainOptions& o, const std::string& v) {
         o.optimizer.warmup_steps = parse_whole<int64_t>("--warmup-steps", v, 0, "100");
       }},
      {"--accumulate",
       [](TrainOptions& o, const std::string& v) { o.accumulate = parse_whole("--accumulate", v, 1, "4"); }},
      {"--seed", [](TrainOptions& o, const std::string& v) { o.seed = parse_whole<uint64_t>("--seed", v, 0, "0"); }},
      {"--snapshot-dir", [](TrainOptions& o, const std::string& v) { o.snapshot_dir = v; }},
      {"--snapshot-every-seconds",
       [](TrainOptions& o, const std::string& v) {
         o.snapshot_every_seconds = parse_real("--snapshot-every-seconds", v, Sign::NonNegative, "600");
       }},
      {"--keep", [](TrainOptions& o, const std::string& v) { o.keep = parse_whole("--keep", v, 1, "3"); }},
      {"--resume", [](TrainOptions& o, const std::string& v) { o.resume = v; }},
      {"--run-id", [](TrainOptions& o, const std::string& v) { o.run_id = checked_run_id("--run-id", v); }},
      {"--output", [](TrainOptions& o, const std::string& v) { o.output = v; }},
      {"--output-script", [](TrainOptions& o, const std::string& v) { o.output_script = v; }},
      {"--backend", [](TrainOptions& o, const std::string& v) { o.backend = parse_backend(v, "--backend"); }},
      {"--timeout",
       [](TrainOptions& o, const std::string& v) { o.timeout_seconds = positive("--timeout", v, "1800"); }},
      {"--bucket-cap-mb",
       [](TrainOptions& o, const std::string& v) { o.bucket_cap_mb = positive("--bucket-cap-mb", v, "25"); }},
      {"--straggler-threshold", [](TrainOptions& o, const std::string& v) { o.straggler_threshold_pct = percent(v); }},
      {"--recover", [](TrainOptions& o, const std::string& v) { o.recover = parse_recover_mode("--recover", v); }},
      {"--min-ranks",
       [](TrainOptions& o, const std::string& v) { o.min_ranks = parse_whole("--min-ranks", v, 1, "2"); }},
  };
  return options;
}

void set_positionals(TrainOptions& options, const std::vector<std::string>& positionals) {
  if (positionals.size() != 2) {
    throw Error("expected total_epochs and save_every, got " + std::to_string(positionals.size()) +
                " positional arguments; usage: ddp-train [options] total_epochs save_every");
  }
  options.total_epochs = parse_whole("total_epochs", positionals[0], 1, "50");
  options.save_every = parse_whole("save_every", positionals[1], 0, "10");
}

// finalmodel.pt -> finalmodel.script.pt
std::string script_path_for(const std::string& output) {
  const std::size_t slash = output.rfind('/');
  const std::size_t dot = output.rfind('.');
  const bool has_extension = dot != std::string::npos && (slash == std::string::npos || dot > slash + 1);
  return (has_extension ? output.substr(0, dot) : output) + ".script.pt";
}

void check_combination(TrainOptions& options, bool workload_given) {
  if (options.workload == WorkloadKind::FashionMnist && options.data.empty()) {
    throw Error(
        "--workload fashion-mnist needs --data DIR, a directory with train-images-idx3-ubyte and "
        "train-labels-idx1-ubyte");
  }
  if (!options.model.empty() && workload_given) {
    throw Error("--model and --workload both name what to train; give one of them");
  }
  if (!options.model.empty() && options.data.empty()) {
    throw Error("--model " + options.model +
                " needs --data FILE[,FILE...]: torch.save({\"x\": inputs, \"y\": targets}) "
                "files or directories holding x.npy and y.npy");
  }
  if (options.output.empty()) throw Error("--output '' names no file; e.g. --output finalmodel.pt");
  if (options.output_script.empty()) options.output_script = script_path_for(options.output);
  if (options.optimizer.warmup_steps > 0 && options.optimizer.schedule != LrSchedule::Cosine) {
    throw Error("--warmup-steps applies to --lr-schedule cosine; add --lr-schedule cosine or drop --warmup-steps");
  }
}

}  // namespace

TrainOptions parse_train_args(const std::vector<std::string>& args, const EnvLookup& env) {
  TrainOptions options;
  std::vector<std::string> positionals;
  bool workload_given = false;
  bool recover_given = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--help" || arg == "-h") {
      options.help = true;
      return options;
    }
    if (arg.rfind("--", 0) != 0 || arg.size() == 2) {
      positionals.push_back(arg);
      continue;
    }
    if (arg == "--json") {
      options.json = true;
      continue;
    }
    if (arg == "--join") {
      options.join = true;
      continue;
    }
    const std::size_t equals = arg.find('=');
    const std::string name = arg.substr(0, equals);
    const auto setter = value_options().find(name);
    if (setter == value_options().end()) throw Error("unknown option '" + name + "'; run ddp-train --help");
    if (equals == std::string::npos && i + 1 == args.size()) {
      throw Error(name + " needs a value; run ddp-train --help");
    }
    setter->second(options, equals == std::string::npos ? args[++i] : arg.substr(equals + 1));
    workload_given = workload_given || name == "--workload";
    recover_given = recover_given || name == "--recover";
  }
  set_positionals(options, positionals);
  if (options.snapshot_dir.empty()) options.snapshot_dir = env(vars::kSnapshotDir).value_or(".");
  if (options.snapshot_dir.empty()) options.snapshot_dir = ".";
  if (options.run_id.empty()) options.run_id = default_run_id(env);
  if (!recover_given) {
    if (const auto mode = env(vars::kRecover); mode && !mode->empty())
      options.recover = parse_recover_mode(vars::kRecover, *mode);
  }
  if (env(vars::kJoin).value_or("") == "1") options.join = true;
  if (options.join && options.recover != RecoverMode::InPlace) {
    throw Error("--join (DDP_JOIN=1) joins a run that recovers in place; add --recover in-place (DDP_RECOVER)");
  }
  check_combination(options, workload_given);
  return options;
}

const char* train_usage() {
  return R"(usage: ddp-train [options] total_epochs save_every

Distributed data-parallel training with LibTorch, launched like a torchrun script:
  srun --ddp ddp-train 50 10          (Slurm with the ddp plugin)
  RANK=.. WORLD_SIZE=.. MASTER_ADDR=.. MASTER_PORT=.. ddp-train 50 10
  mpirun -np 4 ddp-train 50 10
  ddp-train 50 10                     (one process)
Trains total_epochs epochs and writes a snapshot every save_every epochs (0: none); resumes from this run's
newest valid snapshot in the snapshot directory. SIGUSR2, SIGTERM or SIGINT (what Slurm sends before a time
limit, at preemption, scancel or the time limit) write a snapshot at the next step boundary and exit with 75
(ddp-restart then requeues the job); a second SIGINT ends the process at once.
A snapshot that cannot be written is reported and tried again at the next one; after 3 failures in a row
the run stops. Snapshot directory: yours alone (owned by you, not writable by others), created mode 0700.

options:
  --batch-size N               per-process batch size (32)
  --workload seed|mlp|fashion-mnist
                               seed: Linear(20,1) on MyTrainDataset; mlp: 3 hidden layers of --width;
                               fashion-mnist: the PyTorch quickstart network on IDX files in --data (seed)
  --width N                    hidden width of the mlp workload (1024)
  --samples N                  samples of the seed and mlp datasets (2048)
  --model FILE                 train this TorchScript module (torch.jit.script(m).save(FILE) or trace) on --data;
                               TorchScript is code that ddp-train runs: load only files you would run as a program
  --data PATH[,PATH...]        --model: files of torch.save({"x": inputs, "y": targets}) and/or directories
                               holding x.npy and y.npy (memory-mapped), their samples in that order;
                               fashion-mnist: a directory with train-images-idx3-ubyte and train-labels-idx1-ubyte
  --loss mse|cross-entropy|nll (--model: cross-entropy when y holds class indices, else mse)
  --optimizer sgd|adamw        torch.optim's SGD or AdamW (sgd)
  --lr X                       learning rate (1e-3)
  --momentum X                 SGD momentum (0)
  --weight-decay X             weight decay (SGD 0, AdamW 0.01)
  --betas B1,B2 / --eps X      AdamW's (0.9,0.999 / 1e-8)
  --clip-grad-norm X           clip the gradients' total 2-norm to X before each step (0: off)
  --lr-schedule constant|step|cosine
                               step: lr x --lr-gamma (0.1) every --lr-step-epochs (10) epochs; cosine: from lr
                               to 0 over the run's optimizer steps, after --warmup-steps N of linear warm-up
  --accumulate N               batches per optimizer step; gradients sync on the last only (1)
  --seed N                     seeds the model, the synthetic data and the sampler's shuffle (0)
  --snapshot-dir DIR           where snapshots go (DDP_SNAPSHOT_DIR, else the working directory)
  --snapshot-every-seconds T   also write a snapshot every T seconds (0: off)
  --keep K                     snapshots kept (3)
  --resume FILE                start from this snapshot (ddp-train's or the seed script's); its weights and
                               optimizer state become the run's: name only files you trust
  --run-id ID                  the run whose snapshots are resumed and pruned (the Slurm job id, else
                               TORCHELASTIC_RUN_ID, else default); other runs' files are left alone
  --output FILE                final model, a state dict torch.load reads (finalmodel.pt)
  --output-script FILE         --model: the trained module as TorchScript (--output's name with .script.pt)
  --backend auto|gloo|nccl|mpi overrides DDP_BACKEND (auto: NCCL on GPUs, else Gloo)
  --timeout SECONDS            rendezvous and collective timeout; then rank 0 names a rank that does not
                               answer (a stopped or hung peer) and the run ends (1800)
  --bucket-cap-mb X            gradient bucket size, as DDP's bucket_cap_mb (25)
  --straggler-threshold PCT    once per epoch, rank 0 names ranks whose compute per step is slower than the
                               median by more than PCT percent, and ranks that reach the all-reduce later than
                               the others by more than PCT percent of a step, with node and device (20)
  --json                       rank 0 also prints each epoch's per-rank scores (compute and arrival at the
                               all-reduce) as a JSON line
  --recover none|in-place      in-place (Gloo): when a rank dies or stops answering within --timeout, the
                               others form a smaller group and go on from their last completed step, without a
                               restart (DDP_RECOVER, which srun --ddp-recover sets; none: the run ends)
  --min-ranks N                in place: with fewer ranks left, or no majority, the ranks write a snapshot and
                               end, for a restart from it (1)
  --join                       in place: this process replaces a lost rank of the running group (the same
                               command, --snapshot-dir and job): it asks rank 0 to join, takes its state at the
                               next step boundary and trains on (DDP_JOIN=1)
environment: RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT GLOO_SOCKET_IFNAME
  DDP_BACKEND DDP_RECOVER DDP_JOIN DDP_SNAPSHOT_DIR SLURM_JOB_ID TORCHELASTIC_RUN_ID TORCHELASTIC_RESTART_COUNT OMP_NUM_THREADS;
  OMPI_COMM_WORLD_* under mpirun
exit status: 0 done, 1 failure (also a snapshot that cannot be read for an I/O error: try again later), 2 bad
  input, 75 stopped on request (SIGUSR2, SIGTERM, SIGINT) after a snapshot; on failure the error also
  goes to TORCHELASTIC_ERROR_FILE in torchrun's format (srun --ddp sets it; ddp-why reads it)
)";
}

const char* to_string(WorkloadKind workload) {
  switch (workload) {
    case WorkloadKind::Seed: return "seed";
    case WorkloadKind::Mlp: return "mlp";
    case WorkloadKind::FashionMnist: return "fashion-mnist";
  }
  return "?";
}

const char* to_string(LossKind loss) {
  switch (loss) {
    case LossKind::MeanSquaredError: return "mse";
    case LossKind::CrossEntropy: return "cross-entropy";
    case LossKind::NegativeLogLikelihood: return "nll";
  }
  return "?";
}

const char* to_string(OptimizerKind optimizer) { return optimizer == OptimizerKind::AdamW ? "adamw" : "sgd"; }

const char* to_string(RecoverMode mode) { return mode == RecoverMode::InPlace ? "in-place" : "none"; }

}  // namespace ddp::runtime
