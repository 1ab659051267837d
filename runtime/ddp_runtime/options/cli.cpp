#include "ddp_runtime/options/cli.hpp"

#include "base/command_line.hpp"
#include "base/parse.hpp"
#include "core/env_names.hpp"
#include "core/error.hpp"
#include "core/job_key.hpp"
#include "ddp_runtime/snapshots/snapshot_files.hpp"

namespace ddp::runtime {
namespace {

using cli::Bound;
using cli::number_text;
using cli::real;
using cli::whole;
using Value = const std::string&;
using Options = TrainOptions;

// The enumerations' names, each spelled here only: parsed, named back (to_string) and listed in the usage.
constexpr cli::Choice<WorkloadKind> kWorkloads[] = {
    {"seed", WorkloadKind::Seed}, {"mlp", WorkloadKind::Mlp}, {"fashion-mnist", WorkloadKind::FashionMnist}};
constexpr cli::Choice<LossKind> kLosses[] = {{"mse", LossKind::MeanSquaredError},
                                             {"cross-entropy", LossKind::CrossEntropy},
                                             {"nll", LossKind::NegativeLogLikelihood}};
constexpr cli::Choice<OptimizerKind> kOptimizers[] = {{"sgd", OptimizerKind::Sgd}, {"adamw", OptimizerKind::AdamW}};
constexpr cli::Choice<LrSchedule> kSchedules[] = {
    {"constant", LrSchedule::Constant}, {"step", LrSchedule::Step}, {"cosine", LrSchedule::Cosine}};
constexpr cli::Choice<RecoverMode> kRecoverModes[] = {{"none", RecoverMode::None}, {"in-place", RecoverMode::InPlace}};

std::string checked_run_id(const std::string& where, const std::string& text) {
  if (!is_valid_run_id(text)) {
    throw Error(where + " '" + text +
                "' is not a run id: use 1-64 letters, digits, '.', '_' or '-', not starting "
                "with '.'; e.g. --run-id resnet-a");
  }
  return text;
}

// A run keeps its identity across restarts: Slurm keeps the job id through requeues and ddp-restart's attempts
// (the step id changes), and srun --ddp gives the job an instance that both keep too (ports.hpp), which sets it apart
// from another job with the same id (a rebuilt cluster, a wrapped MaxJobId): "4711-0a1b2c3d4e5f". torchrun keeps
// its rendezvous id. Runs outside both share "default" unless given --run-id.
std::string default_run_id(const EnvLookup& env) {
  if (const auto job = env("SLURM_JOB_ID")) {
    const std::string run = checked_run_id("SLURM_JOB_ID", *job);
    const auto instance = env(kJobInstanceVariable);
    return instance && is_job_instance(*instance) ? run + "-" + *instance : run;
  }
  if (const auto run = env(vars::kRunId); run && is_valid_run_id(*run)) return *run;
  return "default";
}

void set_betas(OptimizerOptions& o, Value text) {
  const std::size_t comma = text.find(',');
  if (comma == std::string::npos) throw cli::BadValue("is not two numbers separated by a comma");
  o.beta1 = real(text.substr(0, comma), Bound::NonNegative);
  o.beta2 = real(text.substr(comma + 1), Bound::NonNegative);
  if (o.beta1 >= 1 || o.beta2 >= 1) throw cli::BadValue("must both be below 1");
}

// The usage text around the options' lines.
constexpr const char* kUsageIntro = R"(usage: ddp-train [options] total_epochs save_every

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

)";
constexpr const char* kUsageEnd =
    R"(environment: RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT GLOO_SOCKET_IFNAME
  DDP_BACKEND DDP_RECOVER DDP_JOIN DDP_SNAPSHOT_DIR SLURM_JOB_ID TORCHELASTIC_RUN_ID TORCHELASTIC_RESTART_COUNT OMP_NUM_THREADS;
  OMPI_COMM_WORLD_* under mpirun
exit status: 0 done, 1 failure (also a snapshot that cannot be read for an I/O error: try again later), 2 bad
  input, 75 stopped on request (SIGUSR2, SIGTERM, SIGINT) after a snapshot; on failure the error also
  goes to TORCHELASTIC_ERROR_FILE in torchrun's format (srun --ddp sets it; ddp-why reads it)
)";

// Each option once: name, value, help, how it sets TrainOptions, and the default the usage shows (read from
// TrainOptions' own initializers).
const cli::Table<Options>& option_table() {
  static const cli::Table<Options> table = {
      {"--batch-size", "N", "per-process batch size", [](Options& o, Value v) { o.batch_size = whole(v, 1); },
       [](const Options& o) { return std::to_string(o.batch_size); }},
      {"--workload", cli::alternatives(kWorkloads),
       "seed: Linear(20,1) on MyTrainDataset; mlp: 3 hidden layers of --width;\n"
       "fashion-mnist: the PyTorch quickstart network on IDX files in --data",
       [](Options& o, Value v) { o.workload = cli::choose(kWorkloads, v, "a workload"); },
       [](const Options& o) { return std::string(to_string(o.workload)); }},
      {"--width", "N", "hidden width of the mlp workload", [](Options& o, Value v) { o.width = whole(v, 1); },
       [](const Options& o) { return std::to_string(o.width); }},
      {"--samples", "N", "samples of the seed and mlp datasets",
       [](Options& o, Value v) { o.samples = whole<int64_t>(v, 1); },
       [](const Options& o) { return std::to_string(o.samples); }},
      {"--model", "FILE",
       "train this TorchScript module (torch.jit.script(m).save(FILE) or trace) on --data;\n"
       "TorchScript is code that ddp-train runs: load only files you would run as a program",
       [](Options& o, Value v) { o.model = v; }},
      {"--data", "PATH[,PATH...]",
       "--model: files of torch.save({\"x\": inputs, \"y\": targets}) and/or directories\n"
       "holding x.npy and y.npy (memory-mapped), their samples in that order;\n"
       "fashion-mnist: a directory with train-images-idx3-ubyte and train-labels-idx1-ubyte",
       [](Options& o, Value v) { o.data = v; }},
      {"--loss", cli::alternatives(kLosses), "(--model: cross-entropy when y holds class indices, else mse)",
       [](Options& o, Value v) { o.loss = cli::choose(kLosses, v, "a loss"); }},
      {"--optimizer", cli::alternatives(kOptimizers), "torch.optim's SGD or AdamW",
       [](Options& o, Value v) { o.optimizer.kind = cli::choose(kOptimizers, v, "an optimizer"); },
       [](const Options& o) { return std::string(to_string(o.optimizer.kind)); }},
      {"--lr", "X", "learning rate", [](Options& o, Value v) { o.optimizer.lr = real(v, Bound::NonNegative); },
       [](const Options& o) { return number_text(o.optimizer.lr); }},
      {"--momentum", "X", "SGD momentum",
       [](Options& o, Value v) { o.optimizer.momentum = real(v, Bound::NonNegative); },
       [](const Options& o) { return number_text(o.optimizer.momentum); }},
      {"--weight-decay", "X", "weight decay (SGD 0, AdamW 0.01)",
       [](Options& o, Value v) { o.optimizer.weight_decay = real(v, Bound::NonNegative); }, nullptr, "0.01"},
      {"--betas", "B1,B2", "AdamW's betas", [](Options& o, Value v) { set_betas(o.optimizer, v); },
       [](const Options& o) { return number_text(o.optimizer.beta1) + "," + number_text(o.optimizer.beta2); }},
      {"--eps", "X", "AdamW's eps", [](Options& o, Value v) { o.optimizer.eps = real(v, Bound::Positive); },
       [](const Options& o) { return number_text(o.optimizer.eps); }},
      {"--clip-grad-norm", "X", "clip the gradients' total 2-norm to X before each step (0: off)",
       [](Options& o, Value v) { o.optimizer.clip_grad_norm = real(v, Bound::NonNegative); }, nullptr, "1.0"},
      {"--lr-schedule", cli::alternatives(kSchedules),
       "step: lr x --lr-gamma every --lr-step-epochs epochs; cosine: from lr\n"
       "to 0 over the run's optimizer steps, after --warmup-steps N of linear warm-up",
       [](Options& o, Value v) { o.optimizer.schedule = cli::choose(kSchedules, v, "a schedule"); },
       [](const Options& o) { return std::string(to_string(o.optimizer.schedule)); }},
      {"--lr-step-epochs", "N", "step: epochs between two multiplications by --lr-gamma",
       [](Options& o, Value v) { o.optimizer.step_epochs = whole(v, 1); },
       [](const Options& o) { return std::to_string(o.optimizer.step_epochs); }},
      {"--lr-gamma", "X", "step: the factor",
       [](Options& o, Value v) { o.optimizer.gamma = real(v, Bound::NonNegative); },
       [](const Options& o) { return number_text(o.optimizer.gamma); }},
      {"--warmup-steps", "N", "cosine: optimizer steps of linear warm-up",
       [](Options& o, Value v) { o.optimizer.warmup_steps = whole<int64_t>(v, 0); },
       [](const Options& o) { return std::to_string(o.optimizer.warmup_steps); }, "100"},
      {"--accumulate", "N", "batches per optimizer step; gradients sync on the last only",
       [](Options& o, Value v) { o.accumulate = whole(v, 1); },
       [](const Options& o) { return std::to_string(o.accumulate); }, "4"},
      {"--seed", "N", "seeds the model, the synthetic data and the sampler's shuffle",
       [](Options& o, Value v) { o.seed = whole<uint64_t>(v, 0); },
       [](const Options& o) { return std::to_string(o.seed); }},
      {"--snapshot-dir", "DIR", "where snapshots go (DDP_SNAPSHOT_DIR, else the working directory)",
       [](Options& o, Value v) { o.snapshot_dir = v; }},
      {"--snapshot-every-seconds", "T", "also write a snapshot every T seconds (0: off)",
       [](Options& o, Value v) { o.snapshot_every_seconds = real(v, Bound::NonNegative); }, nullptr, "600"},
      {"--keep", "K", "snapshots kept", [](Options& o, Value v) { o.keep = whole(v, 1); },
       [](const Options& o) { return std::to_string(o.keep); }},
      {"--resume", "FILE",
       "start from this snapshot (ddp-train's or the seed script's); its weights and\n"
       "optimizer state become the run's: name only files you trust",
       [](Options& o, Value v) { o.resume = v; }},
      {"--run-id", "ID",
       "the run whose snapshots are resumed and pruned (the Slurm job id and,\n"
       "under srun --ddp, the job's instance: 4711-0a1b2c3d4e5f; else\n"
       "TORCHELASTIC_RUN_ID, else default); other runs' files are left alone",
       [](Options& o, Value v) { o.run_id = checked_run_id("--run-id", v); }},
      {"--output", "FILE", "final model, a state dict torch.load reads", [](Options& o, Value v) { o.output = v; },
       [](const Options& o) { return o.output; }},
      {"--output-script", "FILE", "--model: the trained module as TorchScript (--output's name with .script.pt)",
       [](Options& o, Value v) { o.output_script = v; }},
      {"--backend", std::string(kBackendNames), "overrides DDP_BACKEND (auto: NCCL on GPUs, else Gloo)",
       [](Options& o, Value v) { o.backend = parse_backend(v, "--backend"); }},
      {"--timeout", "SECONDS",
       "rendezvous and collective timeout; then rank 0 names a rank that does not\n"
       "answer (a stopped or hung peer) and the run ends",
       [](Options& o, Value v) { o.timeout_seconds = real(v, Bound::Positive); },
       [](const Options& o) { return number_text(o.timeout_seconds); }},
      {"--bucket-cap-mb", "X", "gradient bucket size, as DDP's bucket_cap_mb",
       [](Options& o, Value v) { o.bucket_cap_mb = real(v, Bound::Positive); },
       [](const Options& o) { return number_text(o.bucket_cap_mb); }},
      {"--straggler-threshold", "PCT",
       "once per epoch, rank 0 names ranks whose compute per step is slower than the\n"
       "median by more than PCT percent, and ranks that reach the all-reduce later than\n"
       "the others by more than PCT percent of a step, with node and device",
       [](Options& o, Value v) { o.straggler_threshold_pct = real(v, Bound::Positive); },
       [](const Options& o) { return number_text(o.straggler_threshold_pct); }},
      {"--json", "",
       "rank 0 also prints each epoch's per-rank scores (compute and arrival at the\n"
       "all-reduce) as a JSON line",
       [](Options& o, Value) { o.json = true; }},
      {"--recover", cli::alternatives(kRecoverModes),
       "in-place (Gloo): when a rank dies or stops answering within --timeout, the\n"
       "others form a smaller group and go on from their last completed step, without a\n"
       "restart (DDP_RECOVER, which srun --ddp-recover sets; none: the run ends)",
       [](Options& o, Value v) { o.recover = cli::choose(kRecoverModes, v, "a recovery mode"); },
       [](const Options& o) { return std::string(to_string(o.recover)); }},
      {"--min-ranks", "N",
       "in place: with fewer ranks left, or no majority, the ranks write a snapshot and\n"
       "end, for a restart from it",
       [](Options& o, Value v) { o.min_ranks = whole(v, 1); },
       [](const Options& o) { return std::to_string(o.min_ranks); }, "2"},
      {"--join", "",
       "in place: this process replaces a lost rank of the running group (the same\n"
       "command, --snapshot-dir and job): it asks rank 0 to join, takes its state at the\n"
       "next step boundary and trains on (DDP_JOIN=1)",
       [](Options& o, Value) { o.join = true; }},
  };
  return table;
}

void set_positionals(TrainOptions& options, const std::vector<std::string>& positionals) {
  if (positionals.size() != 2) {
    throw Error("expected total_epochs and save_every, got " + std::to_string(positionals.size()) +
                " positional arguments; usage: ddp-train [options] total_epochs save_every");
  }
  const auto at_least = [](int min) { return [min](Value text) { return whole(text, min); }; };
  options.total_epochs = cli::value_of("total_epochs", positionals[0], at_least(1), "; e.g. ddp-train 50 10");
  options.save_every = cli::value_of("save_every", positionals[1], at_least(0), "; e.g. ddp-train 50 10");
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

// What the launcher's environment supplies for options not given.
void apply_environment(TrainOptions& options, const cli::Arguments& given, const EnvLookup& env) {
  if (options.snapshot_dir.empty()) options.snapshot_dir = env(vars::kSnapshotDir).value_or(".");
  if (options.snapshot_dir.empty()) options.snapshot_dir = ".";
  if (options.run_id.empty()) options.run_id = default_run_id(env);
  if (!given.was_given("--recover")) {
    if (const auto mode = env(vars::kRecover); mode && !mode->empty()) {
      options.recover = cli::value_of(vars::kRecover, *mode,
                                      [](Value text) { return cli::choose(kRecoverModes, text, "a recovery mode"); });
    }
  }
  if (env(vars::kJoin).value_or("") == "1") options.join = true;
  if (options.join && options.recover != RecoverMode::InPlace) {
    throw Error("--join (DDP_JOIN=1) joins a run that recovers in place; add --recover in-place (DDP_RECOVER)");
  }
}

}  // namespace

ParsedTrainArgs parse_train_args(const std::vector<std::string>& args, const EnvLookup& env) {
  ParsedTrainArgs parsed;
  const cli::Arguments found = cli::parse(option_table(), parsed.options, args, "ddp-train");
  if (found.help) {
    parsed.help = true;
    return parsed;
  }
  set_positionals(parsed.options, found.positionals);
  apply_environment(parsed.options, found, env);
  check_combination(parsed.options, found.was_given("--workload"));
  return parsed;
}

std::string train_usage() {
  return kUsageIntro + ("options:\n" + cli::options_text(option_table(), TrainOptions{})) + kUsageEnd;
}

const char* to_string(WorkloadKind workload) { return cli::name_of(kWorkloads, workload); }
const char* to_string(LossKind loss) { return cli::name_of(kLosses, loss); }
const char* to_string(OptimizerKind optimizer) { return cli::name_of(kOptimizers, optimizer); }
const char* to_string(LrSchedule schedule) { return cli::name_of(kSchedules, schedule); }
const char* to_string(RecoverMode mode) { return cli::name_of(kRecoverModes, mode); }

}  // namespace ddp::runtime
