#include "ddp_runtime/cli.hpp"

#include <charconv>
#include <cmath>
#include <functional>
#include <map>

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

using Setter = std::function<void(TrainOptions&, const std::string&)>;

const std::map<std::string, Setter>& value_options() {
  static const std::map<std::string, Setter> options = {
      {"--batch-size", [](TrainOptions& o, const std::string& v) { o.batch_size = parse_whole("--batch-size", v, 1, "32"); }},
      {"--workload", [](TrainOptions& o, const std::string& v) { o.workload = parse_workload(v); }},
      {"--width", [](TrainOptions& o, const std::string& v) { o.width = parse_whole("--width", v, 1, "1024"); }},
      {"--samples", [](TrainOptions& o, const std::string& v) { o.samples = parse_whole<int64_t>("--samples", v, 1, "2048"); }},
      {"--data", [](TrainOptions& o, const std::string& v) { o.data_dir = v; }},
      {"--lr", [](TrainOptions& o, const std::string& v) { o.lr = parse_real("--lr", v, Sign::NonNegative, "1e-3"); }},
      {"--momentum", [](TrainOptions& o, const std::string& v) { o.momentum = parse_real("--momentum", v, Sign::NonNegative, "0.9"); }},
      {"--accumulate", [](TrainOptions& o, const std::string& v) { o.accumulate = parse_whole("--accumulate", v, 1, "4"); }},
      {"--seed", [](TrainOptions& o, const std::string& v) { o.seed = parse_whole<uint64_t>("--seed", v, 0, "0"); }},
      {"--snapshot-dir", [](TrainOptions& o, const std::string& v) { o.snapshot_dir = v; }},
      {"--snapshot-every-seconds", [](TrainOptions& o, const std::string& v) {
         o.snapshot_every_seconds = parse_real("--snapshot-every-seconds", v, Sign::NonNegative, "600");
       }},
      {"--keep", [](TrainOptions& o, const std::string& v) { o.keep = parse_whole("--keep", v, 1, "3"); }},
      {"--resume", [](TrainOptions& o, const std::string& v) { o.resume = v; }},
      {"--output", [](TrainOptions& o, const std::string& v) { o.output = v; }},
      {"--backend", [](TrainOptions& o, const std::string& v) { o.backend = parse_backend(v, "--backend"); }},
      {"--timeout", [](TrainOptions& o, const std::string& v) { o.timeout_seconds = parse_real("--timeout", v, Sign::Positive, "1800"); }},
      {"--bucket-cap-mb", [](TrainOptions& o, const std::string& v) {
         o.bucket_cap_mb = parse_real("--bucket-cap-mb", v, Sign::Positive, "25");
       }},
      {"--straggler-threshold", [](TrainOptions& o, const std::string& v) {
         o.straggler_threshold_pct = parse_real("--straggler-threshold", v, Sign::Positive, "20");
       }},
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

void check_combination(const TrainOptions& options) {
  if (options.workload == WorkloadKind::FashionMnist && options.data_dir.empty()) {
    throw Error("--workload fashion-mnist needs --data DIR, a directory with train-images-idx3-ubyte and "
                "train-labels-idx1-ubyte");
  }
  if (options.output.empty()) throw Error("--output '' names no file; e.g. --output finalmodel.pt");
}

}  // namespace

TrainOptions parse_train_args(const std::vector<std::string>& args, const EnvLookup& env) {
  TrainOptions options;
  std::vector<std::string> positionals;
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
    const std::size_t equals = arg.find('=');
    const std::string name = arg.substr(0, equals);
    const auto setter = value_options().find(name);
    if (setter == value_options().end()) throw Error("unknown option '" + name + "'; run ddp-train --help");
    if (equals == std::string::npos && i + 1 == args.size()) {
      throw Error(name + " needs a value; run ddp-train --help");
    }
    setter->second(options, equals == std::string::npos ? args[++i] : arg.substr(equals + 1));
  }
  set_positionals(options, positionals);
  if (options.snapshot_dir.empty()) options.snapshot_dir = env("DDP_SNAPSHOT_DIR").value_or(".");
  if (options.snapshot_dir.empty()) options.snapshot_dir = ".";
  check_combination(options);
  return options;
}

const char* train_usage() {
  return R"(usage: ddp-train [options] total_epochs save_every

Distributed data-parallel training with LibTorch, launched like a torchrun script:
  srun --ddp ddp-train 50 10          (Slurm with the ddp plugin)
  RANK=.. WORLD_SIZE=.. MASTER_ADDR=.. MASTER_PORT=.. ddp-train 50 10
  mpirun -np 4 ddp-train 50 10
  ddp-train 50 10                     (one process)
Trains total_epochs epochs and writes a snapshot every save_every epochs (0: none); resumes from the newest
valid snapshot in the snapshot directory. SIGUSR2 writes a snapshot at the next step and exits with 75.

options:
  --batch-size N               per-process batch size (32)
  --workload seed|mlp|fashion-mnist
                               seed: Linear(20,1) on MyTrainDataset; mlp: 3 hidden layers of --width;
                               fashion-mnist: the PyTorch quickstart network on IDX files in --data (seed)
  --width N                    hidden width of the mlp workload (1024)
  --samples N                  samples of the seed and mlp datasets (2048)
  --data DIR                   FashionMNIST train-images-idx3-ubyte and train-labels-idx1-ubyte
  --lr X                       SGD learning rate (1e-3)
  --momentum X                 SGD momentum (0)
  --accumulate N               batches per optimizer step; gradients sync on the last only (1)
  --seed N                     seeds the model, the synthetic data and the sampler's shuffle (0)
  --snapshot-dir DIR           where snapshots go (DDP_SNAPSHOT_DIR, else the working directory)
  --snapshot-every-seconds T   also write a snapshot every T seconds (0: off)
  --keep K                     snapshots kept (3)
  --resume FILE                start from this snapshot (ddp-train's or the seed script's)
  --output FILE                final model, a state dict torch.load reads (finalmodel.pt)
  --backend auto|gloo|nccl|mpi overrides DDP_BACKEND (auto: NCCL on GPUs, else Gloo)
  --timeout SECONDS            rendezvous and collective timeout; then rank 0 names a rank that does not
                               answer (a stopped or hung peer) and the run ends (1800)
  --bucket-cap-mb X            gradient bucket size, as DDP's bucket_cap_mb (25)
  --straggler-threshold PCT    once per epoch, rank 0 names ranks whose compute per step is slower than the
                               median by more than PCT percent, with node and device (20)
  --json                       rank 0 also prints each epoch's per-rank compute scores as a JSON line
environment: RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT GLOO_SOCKET_IFNAME
  DDP_BACKEND DDP_SNAPSHOT_DIR TORCHELASTIC_RESTART_COUNT OMP_NUM_THREADS; OMPI_COMM_WORLD_* under mpirun
exit status: 0 done, 1 failure, 2 bad input, 75 stopped by SIGUSR2 after a snapshot; on failure the error also
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

}  // namespace ddp::runtime
