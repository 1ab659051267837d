#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/zeros.h>

#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "core/container.hpp"
#include "core/error.hpp"
#include "core/redact.hpp"
#include "ddp_runtime/common/error_message.hpp"
#include "ddp_runtime/common/tensor_text.hpp"
#include "ddp_runtime/distributed/mpi_bootstrap.hpp"
#include "ddp_runtime/distributed/peer_check.hpp"
#include "ddp_runtime/options/cli.hpp"
#include "ddp_runtime/snapshots/snapshot_files.hpp"
#include "ddp_runtime/training/stop_request.hpp"
#include "ddp_runtime/training/trainer.hpp"
#include "ddp_runtime/training/workloads.hpp"
#include "report/failure_report.hpp"

namespace ddp::runtime {
namespace {

// How long the ranks whose collective failed wait for each other before rank 0 names the ones that did not come:
// a few seconds, plus twice a step, since the ranks reach the failed collective up to a step apart.
constexpr std::chrono::milliseconds kPeerCheckWindow{3000};
constexpr std::chrono::milliseconds kPeerCheckMaxWindow{60000};

// OpenMP and OpenBLAS size their thread pools from OMP_NUM_THREADS when they start. torchrun sets it to 1 when
// it starts several processes per node and the user did not; without it, they would oversubscribe the cores.
void limit_threads(const Launch& launch) {
  if (launch.omp_num_threads || launch.local_world_size == 1) return;
  at::set_num_threads(1);
  using SetThreads = void (*)(int);
  if (auto set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) set(1);
}

}  // namespace

// --- checks before the first step ---

// The model's forward on the first batch and the loss on its output, without gradients and in eval mode, so that
// neither the parameters, the buffers nor the random number generator change.
void check_job(TrainingJob& job, const TrainOptions& options, c10::Device device) {
  if (!job.model || !job.data) throw Error("the training job has no model or no data set");
  if (job.data->size() == 0) throw Error(job.data->name() + " holds no samples");
  job.model->to(device);
  const Batch batch =
      job.data->get_batch(at::arange(std::min<int64_t>(options.batch_size, job.data->size()), at::kLong));
  at::NoGradGuard no_grad;
  job.model->train(false);
  at::Tensor output;
  try {
    output = job.model->forward(batch.inputs.to(device));
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(job.model_name + " fails on the inputs 'x' of " + job.data->name() + " (a batch of " +
                tensor_text(batch.inputs) + "): " + error_summary(e));
  }
  job.model->train(true);
  const at::Tensor targets = batch.targets.to(device);
  check_loss_fits(job, output, targets);
  try {
    compute_loss(job.loss, output, targets);
  } catch (const c10::Error& e) {
    throw Error(std::string("--loss ") + to_string(job.loss) + " does not fit " + job.model_name + "'s output " +
                tensor_text(output) + " and the targets " + tensor_text(targets) + " of " + job.data->name() + ": " +
                error_summary(e));
  }
}

namespace {

// One rank's bad input is every rank's: the first failing rank's message stops them all, before any of them
// waits in a collective the failed one will never join.
void agree_on_failure(const Distributed& dist, const std::string& local_failure) {
  at::Tensor failed = at::zeros({dist.world_size}, at::kLong);
  if (!local_failure.empty()) failed[dist.rank] = 1;
  all_reduce_sum(dist, failed);
  for (int rank = 0; rank < dist.world_size; ++rank) {
    if (failed[rank].item<int64_t>() == 0) continue;
    const std::string message = broadcast_string(dist, local_failure, rank);
    if (message.front() == 'E') throw Error(message.substr(1));
    throw std::runtime_error(message.substr(1));
  }
}

TrainingJob prepare_job(const Distributed& dist, const TrainOptions& options, const JobFactory& make_job) {
  at::manual_seed(options.seed);
  TrainingJob job;
  std::string failure;
  try {
    job = make_job(options);
    check_job(job, options, dist.device);
  } catch (const Error& e) {
    failure = std::string("E") + e.what();
  } catch (const std::exception& e) {
    failure = "F" + error_message(e);
  }
  agree_on_failure(dist, failure);
  return job;
}

// --- resume ---

std::optional<LoadedSnapshot> find_start(const TrainOptions& options, SnapshotStore& store) {
  if (options.resume.empty()) return store.resume();
  try {
    return load_snapshot(SnapshotFile::open(options.resume));
  } catch (const SnapshotCorrupt& e) {
    throw Error(std::string("--resume: ") + e.what() + "; name a snapshot that ddp-train or the seed script wrote");
  }
}

// Rank 0 opens the snapshot directory and picks the snapshot every rank starts from; a failure there stops every
// rank with rank 0's message instead of leaving the others waiting in the first collective. The others receive the
// bytes rank 0 read, never the file by its path: what sits at that path for them (another node's view of the
// directory, or a file swapped since rank 0 read it) cannot feed them another state.
std::optional<LoadedSnapshot> agree_on_start(const Distributed& dist, const TrainOptions& options,
                                             std::unique_ptr<SnapshotStore>& store, Console& console) {
  std::optional<LoadedSnapshot> loaded;
  std::string decision;
  if (dist.rank == 0) {
    try {
      store = std::make_unique<SnapshotStore>(options.snapshot_dir, options.keep, options.run_id,
                                              [&console](const std::string& message) { console.warn(message); });
      loaded = find_start(options, *store);
      decision = "P" + (loaded ? loaded->path : std::string());
    } catch (const Error& e) {
      decision = std::string("E") + e.what();
    } catch (const std::exception& e) {
      decision = std::string("F") + e.what();
    }
  }
  decision = broadcast_string(dist, decision);
  if (decision.front() == 'E') throw Error(decision.substr(1));
  if (decision.front() == 'F') throw std::runtime_error(decision.substr(1));
  const std::string path = decision.substr(1);
  if (path.empty()) return loaded;
  const ByteView bytes = broadcast_bytes(dist, loaded ? loaded->bytes : ByteView());
  if (loaded) return loaded;
  try {
    return LoadedSnapshot{path, read_snapshot(bytes, path), bytes};
  } catch (const SnapshotCorrupt& e) {
    throw std::runtime_error("rank " + std::to_string(dist.rank) +
                             " cannot read the snapshot rank 0 sent: " + e.what());
  }
}

}  // namespace

int run_training(const TrainOptions& options, const Launch& launch, const JobFactory& make_job) {
  limit_threads(launch);
  install_signal_handlers();
  if (options.join) return run_replacement(options, launch, make_job);
  // Before the rendezvous: every rank refuses alike, none waits for a peer that already left.
  if (options.recover == RecoverMode::InPlace) require_libtorch_2();
  Distributed dist = init_distributed(launch, options.backend.value_or(launch.backend),
                                      std::chrono::milliseconds(static_cast<int64_t>(options.timeout_seconds * 1000)));
  const std::unique_ptr<Recovery> recovery = start_recovery(options, launch, dist);
  Console console;
  StragglerMonitor straggler(dist, recovery ? recovery->ranks() : gather_identities(dist),
                             {options.straggler_threshold_pct, options.json},
                             [&console](const std::string& line) { console.line(line); });
  TrainingJob job = prepare_job(dist, options, make_job);
  std::unique_ptr<SnapshotStore> store;
  const std::optional<LoadedSnapshot> start = agree_on_start(dist, options, store, console);
  if (recovery && store) {
    // Where a replacement finds the group (rank 0 writes it again after every change).
    try {
      store->write_file(group_file_name(options.run_id), recovery->group_file());
    } catch (const std::exception& e) {
      console.warn("a replacement cannot find this run: the group file was not written: " + error_message(e));
    }
  }
  Trainer trainer(dist, options, job, store.get(), console, straggler, recovery.get());
  if (start) trainer.restore(*start);
  int status = 0;
  try {
    status = trainer.train();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    if (recovery) throw;  // recovery named the lost ranks itself
    // A stopped or hung peer fails every other rank's collective at the timeout: name it (peer_check.hpp).
    const auto window = std::min(kPeerCheckWindow + 2 * straggler.mean_step(), kPeerCheckMaxWindow);
    throw std::runtime_error(
        explain_peer_failure(launch, dist.backend, straggler.ranks(), error_message(e), window, dist.store));
  }
  if (status == 0 && recovery && recovery->generation() > 0 && dist.rank == 0) {
    // What ddp-restart looks for: srun's exit status names the tasks that were lost, not the training's end.
    std::fprintf(stderr,
                 "ddp-train: training completed in place by %d of the %d ranks it started with (generation %lld)\n",
                 dist.world_size, launch.world_size, static_cast<long long>(recovery->generation()));
    std::fflush(stderr);
  }
  finalize_mpi();
  return status;
}

namespace {

// A Gloo group let go after a failure may still wait in its destructor for its peers (recovery.hpp): the process
// ends without running exit handlers under that thread.
int leave(int status) {
  if (Recovery::groups_being_released() == 0) return status;
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(status);
}

// With the MPI group, the other ranks would wait in their next collective: the job ends here.
// The error also goes to TORCHELASTIC_ERROR_FILE, where ddp-why and srun --ddp find it.
int fail(const std::string& program, int status, const std::string& message) {
  std::fprintf(stderr, "%s: %s\n", program.c_str(), redact_key_material(message).c_str());
  std::string why;
  if (!write_error_report(message, status, process_environment(), &why)) {
    std::fprintf(stderr, "%s: warning: %s\n", program.c_str(), why.c_str());
  }
  std::fflush(stderr);
  abort_mpi_job(status);
  return status;
}

int run_main(int argc, char** argv, const JobFactory& make_job, const std::string& program) {
  try {
    const EnvLookup env = process_environment();
    const ParsedTrainArgs parsed = parse_train_args(std::vector<std::string>(argv + 1, argv + argc), env);
    if (parsed.help) {
      std::fputs(train_usage().c_str(), stdout);
      return 0;
    }
    const TrainOptions& options = parsed.options;
    const Launch launch = launch_from_environment(env);
    // Before the first step: a snapshot directory srun --ddp made that this container cannot see would take the
    // run's snapshots with it; a binding the container runtime reset is applied again.
    require_prepared_dir(options.snapshot_dir, env);
    if (const auto rebound = restore_cpu_binding(env); rebound && launch.local_rank == 0) {
      std::fprintf(stderr,
                   "%s: the container runtime reset the CPU binding srun --ddp chose (to %s): bound to %s again\n",
                   program.c_str(), rebound->before.c_str(), rebound->after.c_str());
    }
    return run_training(options, launch, make_job);
  } catch (const Error& e) {
    return fail(program, 2, e.what());
  } catch (const std::exception& e) {
    return fail(program, 1, error_message(e));
  }
}

}  // namespace

int train_main(int argc, char** argv, const JobFactory& make_job) {
  const std::string path = argc > 0 ? argv[0] : "ddp-train";
  return leave(run_main(argc, argv, make_job, path.substr(path.rfind('/') + 1)));
}

}  // namespace ddp::runtime
