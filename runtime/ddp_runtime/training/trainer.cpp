#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>

#include "core/container.hpp"
#include "core/error.hpp"
#include "core/json_string.hpp"
#include "core/redact.hpp"
#include "ddp_runtime/c10d_compat.hpp"
#include "ddp_runtime/common/error_message.hpp"
#include "ddp_runtime/common/tensor_text.hpp"
#include "ddp_runtime/distributed/mpi_bootstrap.hpp"
#include "ddp_runtime/distributed/peer_check.hpp"
#include "ddp_runtime/distributed/recovery.hpp"
#include "ddp_runtime/distributed_model.hpp"
#include "ddp_runtime/optimizer.hpp"
#include "ddp_runtime/options/cli.hpp"
#include "ddp_runtime/process_group.hpp"
#include "ddp_runtime/sampler.hpp"
#include "ddp_runtime/snapshot.hpp"
#include "ddp_runtime/train.hpp"
#include "ddp_runtime/training/stop_request.hpp"
#include "ddp_runtime/training/straggler.hpp"
#include "ddp_runtime/training/workloads.hpp"
#include "report/failure_report.hpp"

namespace ddp::runtime {
namespace {

using Clock = std::chrono::steady_clock;
using Seconds = std::chrono::duration<double>;

// How long a stop request may wait for the ranks to agree on it, at most: the poll interval, in steps, is set
// from rank 0's step time so that polls (one small all-reduce each) stay rare.
constexpr double kStopPollSeconds = 0.5;
constexpr int64_t kMaxStopPollSteps = 10000;

// How long the ranks whose collective failed wait for each other before rank 0 names the ones that did not come:
// a few seconds, plus twice a step, since the ranks reach the failed collective up to a step apart.
constexpr std::chrono::milliseconds kPeerCheckWindow{3000};
constexpr std::chrono::milliseconds kPeerCheckMaxWindow{60000};

// When this process started (the kernel's record, before any library loaded): a replacement reports how long it
// took to contribute its first step.
Clock::time_point process_start() {
  std::ifstream stat("/proc/self/stat");
  std::ifstream uptime("/proc/uptime");
  std::string line;
  double up = 0;
  if (!std::getline(stat, line) || !(uptime >> up)) return Clock::now();
  // Field 22, the start in clock ticks after boot, counted after the command's closing parenthesis (field 2).
  std::istringstream fields(line.substr(line.rfind(')') + 2));
  std::string field;
  for (int i = 3; i < 22 && fields >> field; ++i) {
  }
  unsigned long long ticks = 0;
  if (!(fields >> ticks)) return Clock::now();
  const double age = up - static_cast<double>(ticks) / static_cast<double>(sysconf(_SC_CLK_TCK));
  return Clock::now() - std::chrono::duration_cast<Clock::duration>(Seconds(std::max(age, 0.0)));
}

// Lines of the training thread and of the snapshot writer thread never interleave, and carry no key material
// (core/redact.hpp: errors of c10d and Gloo quote the names of the keys they waited for).
class Console {
 public:
  void line(const std::string& text) { write(stdout, text); }
  void warn(const std::string& text) { write(stderr, "ddp-train: warning: " + text); }

 private:
  void write(FILE* stream, const std::string& text) {
    const std::string line = redact_key_material(text) + "\n";
    std::lock_guard<std::mutex> lock(mutex_);
    std::fwrite(line.data(), 1, line.size(), stream);
    std::fflush(stream);
  }
  std::mutex mutex_;
};

std::string format(const char* pattern, double value) {
  char text[64];
  std::snprintf(text, sizeof text, pattern, value);
  return text;
}

std::string duration_text(double seconds) {
  const auto total = static_cast<long>(seconds + 0.5);
  char text[32];
  std::snprintf(text, sizeof text, "%ld:%02ld:%02ld", total / 3600, total / 60 % 60, total % 60);
  return text;
}

NamedTensors model_state(Model& model) {
  NamedTensors state = model.named_parameters();
  for (auto& buffer : model.named_buffers()) state.push_back(std::move(buffer));
  return state;
}

std::vector<at::Tensor> tensors_of(const NamedTensors& named) {
  std::vector<at::Tensor> tensors;
  for (const auto& item : named) tensors.push_back(item.second);
  return tensors;
}

// OpenMP and OpenBLAS size their thread pools from OMP_NUM_THREADS when they start. torchrun sets it to 1 when
// it starts several processes per node and the user did not; without it, they would oversubscribe the cores.
void limit_threads(const Launch& launch) {
  if (launch.omp_num_threads || launch.local_world_size == 1) return;
  at::set_num_threads(1);
  using SetThreads = void (*)(int);
  if (auto set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) set(1);
}

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

const at::Tensor* find_tensor(const NamedTensors& tensors, const std::string& name) {
  for (const auto& [key, tensor] : tensors) {
    if (key == name) return &tensor;
  }
  return nullptr;
}

void check_fits(const NamedTensors& model, const LoadedSnapshot& snapshot, const std::string& model_name) {
  const std::string fix =
      "; resume with the model it was written with (this run trains " + model_name + "), or use another --snapshot-dir";
  for (const auto& [name, tensor] : model) {
    const at::Tensor* saved = find_tensor(snapshot.content.model_state, name);
    if (saved == nullptr) throw Error("snapshot " + snapshot.path + " has no tensor '" + name + "' of the model" + fix);
    if (saved->sizes() != tensor.sizes()) {
      throw Error("snapshot " + snapshot.path + " does not fit the model: '" + name + "' is " +
                  shape_text(saved->sizes()) + " in the snapshot but " + shape_text(tensor.sizes()) + " in the model" +
                  fix);
    }
  }
  for (const auto& [name, tensor] : snapshot.content.model_state) {
    if (find_tensor(model, name) == nullptr) {
      throw Error("snapshot " + snapshot.path + " has a tensor '" + name + "' that the model does not have" + fix);
    }
  }
}

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

// --- training ---

class Trainer {
 public:
  Trainer(Distributed& dist, const TrainOptions& options, TrainingJob& job, SnapshotStore* store, Console& console,
          StragglerMonitor& straggler, Recovery* recovery)
      : dist_(dist),
        options_(options),
        job_(job),
        model_(*job.model),
        parameters_(model_.named_parameters()),
        buffers_(tensors_of(model_.named_buffers())),
        optimizer_(tensors_of(parameters_), options.optimizer),
        sampler_(job.data->size(), dist.world_size, dist.rank, true, options.seed),
        store_(store),
        console_(console),
        straggler_(straggler),
        recovery_(recovery) {
    progress_.seed = options.seed;
    progress_.world_size = dist.world_size;
    progress_.batch_size = options.batch_size;
    progress_.planned_world = dist.world_size;
    total_steps_ = planned_steps(progress_.planned_world);
  }

  void restore(const LoadedSnapshot& snapshot);
  // One line when this run's optimizer options differ from those the snapshot was written with: they apply from
  // here on, which the user may mean (a lower --lr to finish) or not (another job's command line).
  void report_changed_hyperparameters(const SnapshotContent& saved);
  // `joined`: this process is a replacement that joined the run as that generation (recovery.hpp).
  int train(const std::optional<Regrouped>& joined = std::nullopt);

 private:
  int64_t planned_steps(int64_t world) const;
  EpochPlan plan_for(int64_t epoch);
  // How an epoch's loop ended: at its end, stopped on request, or paused at a step boundary for replacements.
  enum class EpochEnd { Done, Stopped, Paused };
  EpochEnd run_epoch(int64_t epoch);
  enum class Boundary { Go, Stop, Admit };
  Boundary poll(Seconds step_time);
  void run_step(const at::Tensor& samples, const std::vector<BatchSpan>& batches, int64_t epoch);
  void after_step(int64_t epoch, bool epoch_end);
  SnapshotContent live_content();
  void apply_state(const SnapshotContent& state, const std::string& source);
  std::string rank_label() const;
  void build_ddp();
  void finish();
  // Recovery in place (recovery.hpp).
  bool recoverable(const std::exception& e) const;
  void save_step_start();
  void roll_back_step();
  void regroup(std::string why, bool failed);
  void join_generation(const Regrouped& regrouped);
  void take_state_from_rank_zero();
  void share_out_the_epoch();
  [[noreturn]] void fall_back(const Regrouped& regrouped, const std::string& why);
  void report_recovery();
  void write_group_file();
  void mark_group_ended(SnapshotStore& store);
  SnapshotStore& snapshot_store();
  // Rank 0 after a regroup, or at a snapshot due while its directory could not be opened: opens it, or says why not
  // and returns false (training goes on; after kMaxFailedSnapshots in a row, storage_fault_ says why the run ends).
  bool open_store_mid_run();

  Distributed& dist_;
  const TrainOptions& options_;
  TrainingJob& job_;
  Model& model_;
  NamedTensors parameters_;
  std::vector<at::Tensor> buffers_;
  Optimizer optimizer_;
  DistributedSampler sampler_;
  std::unique_ptr<DistributedModel> ddp_;
  SnapshotStore* store_;                      // rank 0 only
  std::unique_ptr<SnapshotStore> own_store_;  // made when this rank became rank 0 in place, or writes the fallback
  bool leads_without_store_ = false;          // rank 0 in place whose snapshot directory could not be opened
  int store_open_failures_ = 0;               // in a row
  // Rank 0: why the run ends for its storage (StorageFault), once snapshots failed kMaxFailedSnapshots times in a
  // row; every rank learns it at the next vote (poll) and ends with it, so that no rank goes on to lead a run whose
  // storage has failed (each next leader would end the same way, one regroup at a time).
  std::string storage_fault_;
  Console& console_;
  StragglerMonitor& straggler_;
  Recovery* recovery_;  // null without --recover in-place
  TrainingProgress progress_;
  int64_t total_steps_ = 0;
  Clock::time_point last_snapshot_ = Clock::now();
  int64_t stop_poll_steps_ = 1;
  Seconds poll_window_{0};
  int64_t poll_window_steps_ = 0;
  at::Tensor epoch_loss_;  // sum of the batches' mean losses, kept on the device until the epoch ends
  int64_t epoch_batches_ = 0;
  int64_t epoch_samples_ = 0;
  int64_t stats_epoch_ = -1;  // the epoch the three above count
  int64_t run_samples_ = 0;
  // A recovery, reported by rank 0 once the new group has completed its first step.
  struct Recovered {
    Regrouped regrouped;
    std::string why;
    Clock::time_point failed_at;  // when this rank's collective failed, or the ranks paused for a replacement
    bool joined = false;          // this process is the replacement
  };
  std::optional<Recovered> recovered_;
  bool admit_ = false;  // the ranks agreed to take replacements in at this step boundary
  Clock::time_point last_join_check_;
  // What a step changes before its optimizer step, kept at its start so that a failed step can be undone.
  struct StepStart {
    bool active = false;
    at::Tensor rng_state;
    std::vector<at::Tensor> buffers;
    at::Tensor epoch_loss;
    int64_t epoch_batches = 0;
    int64_t epoch_samples = 0;
  } step_start_;
};

// The optimizer steps of the whole run with `world` ranks: the cosine schedule's length.
int64_t Trainer::planned_steps(int64_t world) const {
  const DistributedSampler planned(job_.data->size(), static_cast<int>(world), 0, true, options_.seed);
  const int64_t batches = (planned.num_samples() + options_.batch_size - 1) / options_.batch_size;
  return options_.total_epochs * ((batches + options_.accumulate - 1) / options_.accumulate);
}

// The model, optimizer and generator of a snapshot, or of the state another rank sent.
void Trainer::apply_state(const SnapshotContent& saved, const std::string& source) {
  if (saved.optimizer) optimizer_.load(*saved.optimizer, source);
  {
    c10::NoGradGuard no_grad;
    for (auto& [name, tensor] : model_state(model_)) tensor.copy_(*find_tensor(saved.model_state, name));
  }
  if (saved.rng_state.defined()) {
    at::Generator generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(saved.rng_state);
  }
}

void Trainer::restore(const LoadedSnapshot& snapshot) {
  const SnapshotContent& saved = snapshot.content;
  check_fits(model_state(model_), snapshot, job_.model_name);
  const bool has_progress = saved.progress.world_size > 0;
  if (has_progress && saved.progress.seed != options_.seed) {
    throw Error("snapshot " + snapshot.path + " was written with --seed " + std::to_string(saved.progress.seed) +
                ", this run has --seed " + std::to_string(options_.seed) + "; pass --seed " +
                std::to_string(saved.progress.seed) + " to resume it, or use another --snapshot-dir");
  }
  apply_state(saved, "snapshot " + snapshot.path);
  progress_.epochs_run = saved.progress.epochs_run;
  progress_.global_step = saved.progress.global_step;
  progress_.batches_done = saved.progress.batches_done;
  progress_.layout_start = saved.progress.layout_start;
  progress_.schedule_step = saved.progress.schedule_step;
  if (saved.progress.planned_world > 0) progress_.planned_world = saved.progress.planned_world;
  total_steps_ = planned_steps(progress_.planned_world);
  const bool same_layout =
      saved.progress.world_size == dist_.world_size && saved.progress.batch_size == options_.batch_size;
  if ((progress_.batches_done > 0 || progress_.layout_start > 0) && !same_layout) {
    // The rest of the epoch is shared out over this run's ranks from where the snapshot stopped.
    progress_.layout_start = saved.progress.samples_done();
    progress_.batches_done = 0;
    if (dist_.rank == 0) {
      console_.line("Snapshot " + snapshot.path + " stopped inside epoch " + std::to_string(progress_.epochs_run) +
                    " with another world size or batch size; its remaining samples are shared out over " +
                    std::to_string(dist_.world_size) + " ranks");
    }
  }
  if (dist_.rank == 0) {
    console_.line("Resuming training from snapshot at Epoch " + std::to_string(progress_.epochs_run) + " (" +
                  snapshot.path + ")");
    report_changed_hyperparameters(saved);
  }
}

void Trainer::report_changed_hyperparameters(const SnapshotContent& saved) {
  // A snapshot Python wrote records the lr it stopped at (after its schedule), not the run's.
  if (!saved.optimizer || saved.from_python) return;
  const std::vector<std::string> changed = optimizer_.changed_hyperparameters(*saved.optimizer);
  if (changed.empty()) return;
  std::string list;
  for (const std::string& item : changed) list += (list.empty() ? "" : ", ") + item;
  console_.line("Resuming with other hyperparameters than the snapshot was written with: " + list +
                "; they apply from here on");
}

std::string Trainer::rank_label() const {
  return std::string(dist_.device.is_cuda() ? "[GPU" : "[CPU") + std::to_string(dist_.rank) + "]";
}

SnapshotContent Trainer::live_content() {
  SnapshotContent content;
  content.model_state = model_state(model_);
  content.optimizer = optimizer_.state();
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  content.rng_state = generator.get_state();
  content.progress = progress_;
  content.run_id = options_.run_id;
  return content;
}

// A snapshot started at the last step boundary copies the parameters while this step's forward and backward
// passes run; the optimizer step, which changes them, waits for the copy. Buffers (batch-norm statistics)
// change in the forward pass already.
void Trainer::run_step(const at::Tensor& samples, const std::vector<BatchSpan>& batches, int64_t epoch) {
  if (store_ != nullptr && !buffers_.empty()) store_->before_update();
  zero_gradients(tensors_of(parameters_));
  const auto count = static_cast<int64_t>(batches.size());
  for (int64_t b = 0; b < count; ++b) {
    const BatchSpan& span = batches[b];
    const Batch batch = job_.data->get_batch(samples.slice(0, span.start, span.start + span.size));
    const at::Tensor input = batch.inputs.to(dist_.device);
    const at::Tensor target = batch.targets.to(dist_.device);
    // Gradient accumulation: only the step's last batch synchronises, as under DDP's no_sync().
    std::optional<DistributedModel::NoSync> accumulate_only;
    if (b + 1 < count) accumulate_only.emplace(*ddp_);
    const at::Tensor output = ddp_->forward([&] { return model_.forward(input); });
    const at::Tensor loss = compute_loss(job_.loss, output, target);
    epoch_loss_ = epoch_loss_.defined() ? epoch_loss_ + loss.detach() : loss.detach();
    epoch_samples_ += input.size(0);
    ++epoch_batches_;
    (count > 1 ? loss / static_cast<double>(count) : loss).backward();
  }
  straggler_.synchronised();  // before waiting for a snapshot's copy, which is no part of the collective
  if (store_ != nullptr) store_->before_update();
  straggler_.backward_finished();
  optimizer_.set_lr(scheduled_lr(options_.optimizer, progress_.schedule_step, epoch, total_steps_));
  optimizer_.step();
}

// All ranks must stop at the same step, or the ones still training would wait for the others forever; the same
// vote carries rank 0's news of replacements that asked to join, so that all ranks take them in at one step.
Trainer::Boundary Trainer::poll(Seconds step_time) {
  const auto joins = [this] {
    if (recovery_ == nullptr || dist_.rank != 0) return false;
    last_join_check_ = Clock::now();
    return recovery_->joins_pending();
  };
  if (dist_.world_size == 1) {
    if (!storage_fault_.empty()) throw StorageFault(storage_fault_);
    if (stop_requested()) return Boundary::Stop;
    const bool due = Seconds(Clock::now() - last_join_check_).count() >= kStopPollSeconds;
    return due && joins() ? Boundary::Admit : Boundary::Go;
  }
  poll_window_ += step_time;
  ++poll_window_steps_;
  if (progress_.global_step % stop_poll_steps_ != 0) return Boundary::Go;
  const double mean_step = poll_window_.count() / static_cast<double>(poll_window_steps_);
  const double proposal = std::clamp(kStopPollSeconds / std::max(mean_step, 1e-9), 1.0, double(kMaxStopPollSteps));
  at::Tensor votes = at::tensor({stop_requested() ? 1.0 : 0.0, dist_.rank == 0 ? std::floor(proposal) : 0.0,
                                 joins() ? 1.0 : 0.0, storage_fault_.empty() ? 0.0 : 1.0},
                                at::kDouble);
  all_reduce_sum(dist_, votes);
  if (votes[3].item<double>() > 0) throw StorageFault(broadcast_string(dist_, storage_fault_, 0));
  stop_poll_steps_ = std::max<int64_t>(1, static_cast<int64_t>(votes[1].item<double>()));
  poll_window_ = Seconds(0);
  poll_window_steps_ = 0;
  if (votes[0].item<double>() > 0) return Boundary::Stop;
  return votes[2].item<double>() > 0 ? Boundary::Admit : Boundary::Go;
}

void Trainer::after_step(int64_t epoch, bool epoch_end) {
  if (store_ == nullptr && !leads_without_store_) return;
  if (!storage_fault_.empty()) return;
  try {
    if (store_ != nullptr) store_->check_failures();
    const bool epoch_due = epoch_end && options_.save_every > 0 && epoch % options_.save_every == 0;
    const bool time_due = options_.snapshot_every_seconds > 0 &&
                          Seconds(Clock::now() - last_snapshot_).count() >= options_.snapshot_every_seconds;
    if (!epoch_due && !time_due) return;
    last_snapshot_ = Clock::now();
    if (store_ == nullptr && !open_store_mid_run()) return;
    const std::string where =
        epoch_end ? "Epoch " + std::to_string(epoch)
                  : "Epoch " + std::to_string(epoch) + " (batch " + std::to_string(progress_.batches_done) + ")";
    store_->save_async(live_content(), [this, where](const std::string& path) {
      console_.line(where + " | Training snapshot saved at " + path);
    });
  } catch (const StorageFault& e) {
    storage_fault_ = e.what();  // every rank ends with it at the next vote
  }
}

int64_t step_samples(const std::vector<BatchSpan>& batches) {
  int64_t samples = 0;
  for (const BatchSpan& batch : batches) samples += batch.size;
  return samples;
}

// The epoch's layout: DistributedSampler's from its start, or, after the world changed inside it, the rest of its
// order shared out over the ranks there are now.
EpochPlan Trainer::plan_for(int64_t epoch) {
  sampler_.set_epoch(epoch);
  if (progress_.layout_start == 0) return plan_epoch(sampler_.indices(), options_.batch_size, options_.accumulate);
  return plan_rest_of_epoch(sampler_.order(), progress_.layout_start, dist_.world_size, dist_.rank, options_.batch_size,
                            options_.accumulate);
}

Trainer::EpochEnd Trainer::run_epoch(int64_t epoch) {
  const EpochPlan plan = plan_for(epoch);
  const at::Tensor samples = at::tensor(plan.samples, at::kLong);
  std::size_t batches = 0;
  for (const auto& step : plan.steps) batches += step.size();
  console_.line(rank_label() + " Epoch " + std::to_string(epoch) +
                " | Batchsize: " + std::to_string(options_.batch_size) + " | Steps: " + std::to_string(batches));
  if (stats_epoch_ != epoch) {
    epoch_loss_ = at::Tensor();
    epoch_batches_ = 0;
    epoch_samples_ = 0;
    stats_epoch_ = epoch;
  }
  const auto epoch_start = Clock::now();
  const auto steps = static_cast<int64_t>(plan.steps.size());
  for (int64_t step = progress_.batches_done / options_.accumulate; step < steps; ++step) {
    const auto step_start = Clock::now();
    save_step_start();
    straggler_.step_started();
    run_step(samples, plan.steps[step], epoch);
    straggler_.step_finished();
    progress_.batches_done += static_cast<int64_t>(plan.steps[step].size());
    ++progress_.global_step;
    run_samples_ += step_samples(plan.steps[step]) * dist_.world_size;
    report_recovery();
    progress_.schedule_step += static_cast<double>(dist_.world_size) / static_cast<double>(progress_.planned_world);
    step_start_.active = false;
    const bool epoch_end = step + 1 == steps;
    progress_.epochs_run = epoch_end ? epoch + 1 : epoch;
    if (epoch_end) {
      progress_.batches_done = 0;
      progress_.layout_start = 0;
      progress_.world_size = dist_.world_size;
    }
    after_step(epoch, epoch_end);
    const Boundary boundary = poll(Clock::now() - step_start);
    if (boundary == Boundary::Stop) return EpochEnd::Stopped;
    if (boundary == Boundary::Admit) {
      admit_ = true;
      if (!epoch_end) return EpochEnd::Paused;
    }
  }
  const double seconds = Seconds(Clock::now() - epoch_start).count();
  if (dist_.rank == 0 && epoch_samples_ > 0) {
    const double rate = static_cast<double>(epoch_samples_ * dist_.world_size) / seconds;
    const double loss = epoch_loss_.item<double>() / static_cast<double>(epoch_batches_);
    console_.line("Epoch " + std::to_string(epoch) + " | Loss: " + format("%.6f", loss) +
                  " | Samples/s: " + format("%.0f", rate) +
                  " | ETA: " + duration_text(seconds * double(options_.total_epochs - epoch - 1)));
  }
  straggler_.end_epoch(epoch);
  return EpochEnd::Done;
}

void Trainer::finish() {
  if (store_ == nullptr && !leads_without_store_) return;
  if (store_ != nullptr) store_->wait();
  write_model_file(options_.output, model_state(model_));
  console_.line("Final model saved at " + options_.output);
  if (model_.write_torchscript(options_.output_script)) {
    console_.line("TorchScript model saved at " + options_.output_script);
  }
  if (store_ != nullptr) mark_group_ended(*store_);
}

// The run's group file says it ended: a replacement that reads it gives up at once.
void Trainer::mark_group_ended(SnapshotStore& store) {
  if (recovery_ == nullptr) return;
  try {
    store.write_file(group_file_name(options_.run_id), recovery_->ended_group_file());
  } catch (const std::exception& e) {
    console_.warn("the group file was not marked as ended: " + error_message(e));
  }
}

void Trainer::build_ddp() {
  const auto cap = static_cast<int64_t>(options_.bucket_cap_mb * (1 << 20));
  // Gradients as bucket views: one copy of the gradients less each way per step (5% on the MLP-1024 bench).
  ddp_ = std::make_unique<DistributedModel>(
      parameters_, buffers_, dist_,
      DdpOptions{static_cast<int64_t>(cap), std::min<int64_t>(static_cast<int64_t>(cap), kFirstBucketBytes), true});
}

int Trainer::train(const std::optional<Regrouped>& joined) {
  straggler_.attach(tensors_of(parameters_));
  if (joined) {
    join_generation(*joined);
    recovered_ = Recovered{*joined, "", process_start(), true};
  } else {
    build_ddp();
  }
  const auto start = Clock::now();
  const int64_t first_epoch = progress_.epochs_run;
  while (progress_.epochs_run < options_.total_epochs) {
    const int64_t epoch = progress_.epochs_run;
    EpochEnd end = EpochEnd::Done;
    try {
      end = run_epoch(epoch);
    } catch (const Error&) {
      throw;
    } catch (const StorageFault&) {
      throw;
    } catch (const std::exception& e) {
      if (!recoverable(e)) throw;
      regroup(error_message(e), true);
      continue;
    }
    if (admit_) {
      admit_ = false;
      regroup("a replacement asked to join", false);
    }
    if (end != EpochEnd::Stopped) continue;
    if (store_ != nullptr || (leads_without_store_ && open_store_mid_run())) {
      console_.line("Epoch " + std::to_string(epoch) + " | Training snapshot saved at " + store_->save(live_content()));
    }
    at::Tensor done = at::zeros({1}, at::kDouble);
    all_reduce_sum(dist_, done);  // no rank exits before rank 0's snapshot is durable
    const std::string signal = stop_signal_name();
    console_.line(rank_label() + " Stopped at epoch " + std::to_string(progress_.epochs_run) + ", batch " +
                  std::to_string(progress_.batches_done) + " on request" + (signal.empty() ? "" : " (" + signal + ")") +
                  "; run the same command to resume");
    return kExitStopped;
  }
  const double seconds = Seconds(Clock::now() - start).count();
  finish();
  if (dist_.rank == 0 && run_samples_ > 0) {
    console_.line("Trained " + std::to_string(options_.total_epochs - first_epoch) + " epochs (" +
                  std::to_string(run_samples_) + " samples) in " + format("%.3f", seconds) +
                  " s: " + format("%.0f", double(run_samples_) / seconds) + " samples/s");
  }
  if (store_ != nullptr && store_->async_saves() > 0) {
    console_.line("Snapshots: " + std::to_string(store_->async_saves()) +
                  " written in the background; training "
                  "blocked " +
                  format("%.3f", store_->blocked().count() * 1000) + " ms in total");
  }
  return 0;
}

// --- recovery in place ---

bool Trainer::recoverable(const std::exception& e) const {
  return recovery_ != nullptr && is_peer_failure(error_message(e));
}

void Trainer::save_step_start() {
  if (recovery_ == nullptr) return;
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  {
    std::lock_guard<std::mutex> lock(generator.mutex());
    step_start_.rng_state = generator.get_state();
  }
  step_start_.buffers.clear();
  for (const at::Tensor& buffer : buffers_) step_start_.buffers.push_back(buffer.detach().clone());
  step_start_.epoch_loss = epoch_loss_;
  step_start_.epoch_batches = epoch_batches_;
  step_start_.epoch_samples = epoch_samples_;
  step_start_.active = true;
}

// The step in flight is discarded: what its forward passes changed goes back (the generator that dropout draws
// from, the buffers that batch norm updates); its gradients are zeroed at the next step's start.
void Trainer::roll_back_step() {
  if (!step_start_.active) return;
  {
    at::Generator generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(step_start_.rng_state);
  }
  c10::NoGradGuard no_grad;
  for (std::size_t i = 0; i < buffers_.size(); ++i) buffers_[i].copy_(step_start_.buffers[i]);
  epoch_loss_ = step_start_.epoch_loss;
  epoch_batches_ = step_start_.epoch_batches;
  epoch_samples_ = step_start_.epoch_samples;
  step_start_.active = false;
}

// Where a replacement finds the group: rank 0 keeps the group file in the snapshot directory.
void Trainer::write_group_file() {
  try {
    snapshot_store().write_file(group_file_name(options_.run_id), recovery_->group_file());
  } catch (const std::exception& e) {
    console_.warn("a replacement cannot find this run: the group file was not written: " + error_message(e));
  }
}

SnapshotStore& Trainer::snapshot_store() {
  if (store_ == nullptr) {
    own_store_ = std::make_unique<SnapshotStore>(options_.snapshot_dir, options_.keep, options_.run_id,
                                                 [this](const std::string& message) { console_.warn(message); });
    store_ = own_store_.get();
  }
  return *store_;
}

// A full disk, a quota or a storage server that times out at a leader change must not end the run (each next
// leader would end the same way, until no rank is left): the new rank 0 trains on without snapshots and tries again
// when the next one is due, and only kMaxFailedSnapshots failures in a row end the run, as failed writes do.
bool Trainer::open_store_mid_run() {
  try {
    snapshot_store();
    leads_without_store_ = false;
    store_open_failures_ = 0;
    return true;
  } catch (const std::exception& e) {
    leads_without_store_ = true;
    last_snapshot_ = Clock::now();  // the next try when the next snapshot is due, not at the next step
    const std::string why = error_message(e);
    if (++store_open_failures_ >= kMaxFailedSnapshots) {
      storage_fault_ = std::to_string(store_open_failures_) + " times in a row rank 0 could not open " +
                       options_.snapshot_dir + " for snapshots (last: " + why +
                       "); stopping before more training is lost: fix the file system or free space, then run the "
                       "same command to resume from the last snapshot";
      return false;
    }
    console_.warn("rank 0 cannot write snapshots now (" + why + "); training goes on, and the next snapshot tries " +
                  "again");
    return false;
  }
}

// After a failed collective (`failed`), or at a step boundary where replacements join: the group is let go and the
// ranks meet again, until a generation forms or cannot.
void Trainer::regroup(std::string why, bool failed) {
  const auto failed_at = Clock::now();
  if (failed) roll_back_step();
  ddp_.reset();
  Recovery::release_group(dist_);
  for (;;) {
    Regrouped regrouped;
    try {
      regrouped = recovery_->regroup({progress_.global_step, true});
      for (const std::string& refusal : regrouped.refused) console_.warn(refusal);
      if (regrouped.formed) {
        join_generation(regrouped);
        recovered_ = Recovered{regrouped, why, failed_at, false};
        return;
      }
    } catch (const Error&) {
      throw;
    } catch (const LeftOut&) {
      throw;
    } catch (const std::exception& e) {
      // Another failure while the group formed or took its state: the members meet again.
      if (dynamic_cast<const GroupNotFormed*>(&e) == nullptr && !is_peer_failure(error_message(e))) throw;
      why = error_message(e);
      ddp_.reset();
      Recovery::release_group(dist_);
      continue;
    }
    fall_back(regrouped, why);
  }
}

// Every member runs the same collectives, in this order: the state when a member is behind, then the model's
// broadcast from rank 0 that DistributedModel makes.
void Trainer::join_generation(const Regrouped& regrouped) {
  if (regrouped.someone_behind) take_state_from_rank_zero();
  share_out_the_epoch();
  build_ddp();
  straggler_.regrouped(recovery_->ranks());
  if (dist_.rank == 0) {
    if (store_ != nullptr || open_store_mid_run()) write_group_file();
  } else {
    if (store_ != nullptr) store_->wait();  // a rank that was rank 0 lets its last snapshot finish, and writes no more
    store_ = nullptr;
    leads_without_store_ = false;
  }
  stop_poll_steps_ = 1;
  poll_window_ = Seconds(0);
  poll_window_steps_ = 0;
}

// Rank 0 of the new generation holds the newest state: it sends all of it, as a snapshot's bytes, to the others.
void Trainer::take_state_from_rank_zero() {
  std::vector<char> mine;
  if (dist_.rank == 0) {
    mine = snapshot_bytes(live_content());
    const std::string mac = recovery_->state_mac(mine.data(), mine.size());
    mine.insert(mine.end(), mac.begin(), mac.end());
  }
  at::Tensor length = at::tensor({static_cast<int64_t>(mine.size())}, at::kLong);
  std::vector<at::Tensor> message{length};
  dist_.group->broadcast(message)->wait();
  at::Tensor bytes = dist_.rank == 0 ? at::from_blob(mine.data(), {static_cast<int64_t>(mine.size())}, at::kByte)
                                     : at::empty({length.item<int64_t>()}, at::kByte);
  message = {bytes};
  dist_.group->broadcast(message)->wait();
  if (dist_.rank == 0) return;
  const auto* data = reinterpret_cast<const char*>(bytes.data_ptr<uint8_t>());
  const std::size_t size =
      static_cast<std::size_t>(bytes.numel()) - std::min<std::size_t>(bytes.numel(), kStateMacLength);
  if (!same_mac(std::string(data + size, static_cast<std::size_t>(bytes.numel()) - size),
                recovery_->state_mac(data, size))) {
    throw std::runtime_error("refused the state rank 0 sent at generation " + std::to_string(recovery_->generation()) +
                             ": its MAC under the job's key does not verify (it was changed on the way)");
  }
  const SnapshotContent state =
      read_snapshot(bytes_in_memory(std::vector<char>(data, data + size)), "the state rank 0 sent");
  apply_state(state, "the state rank 0 sent");
  progress_ = state.progress;
  total_steps_ = planned_steps(progress_.planned_world);
}

// The rest of the epoch goes to the ranks there are now, from the first sample no rank trained yet.
void Trainer::share_out_the_epoch() {
  const bool epoch_start = progress_.batches_done == 0 && progress_.layout_start == 0;
  if (!epoch_start) {
    progress_.layout_start = progress_.samples_done();
    progress_.batches_done = 0;
  }
  progress_.world_size = dist_.world_size;
  progress_.batch_size = options_.batch_size;
  sampler_ = DistributedSampler(job_.data->size(), dist_.world_size, dist_.rank, true, options_.seed);
}

void Trainer::report_recovery() {
  if (!recovered_) return;
  const Recovered r = std::move(*recovered_);
  recovered_.reset();
  const double seconds = Seconds(Clock::now() - r.failed_at).count();
  const std::string step = std::to_string(progress_.global_step - 1);
  if (r.joined) {
    console_.line(rank_label() + " Joined the run as " + describe_rank(straggler_.ranks(), dist_.rank) +
                  ", healed from rank 0 at step " + step + ": its first step done " + format("%.2f", seconds) +
                  " s after this process started (generation " + std::to_string(r.regrouped.generation) + ")");
  }
  if (dist_.rank != 0) return;
  const std::string lost = describe_lost(r.regrouped.lost);
  std::string joined;
  for (const RankIdentity& identity : r.regrouped.joined) {
    joined += (joined.empty() ? "" : ", ") + describe_rank({identity}, 0);
  }
  const std::string what = lost.empty() ? "Grew in place: " + joined + " joined, healed from rank 0"
                                        : "Recovered in place: " + lost + " lost (" + first_line(r.why) + ")" +
                                              (joined.empty() ? "" : ", " + joined + " joined");
  console_.line("Epoch " + std::to_string(progress_.epochs_run) + " | " + what + "; " +
                std::to_string(dist_.world_size) + " ranks went on from step " + step + ", their first step done " +
                format("%.2f", seconds) + " s after " + (lost.empty() ? "the pause" : "the failure was seen") +
                " (generation " + std::to_string(r.regrouped.generation) + ", " +
                format("%.2f", r.regrouped.seconds.count()) + " s to form it)");
  if (!options_.json) return;
  std::string ranks;
  for (const Lost& l : r.regrouped.lost) {
    ranks += std::string(ranks.empty() ? "" : ", ") + "{\"rank\": " + std::to_string(l.id) +
             ", \"host\": " + json_string(l.identity.host) + ", \"dead\": " + (l.dead ? "true" : "false") + "}";
  }
  console_.line("{\"event\": \"recovered\", \"generation\": " + std::to_string(r.regrouped.generation) +
                ", \"world_size\": " + std::to_string(dist_.world_size) + ", \"step\": " + step +
                ", \"joined\": " + std::to_string(r.regrouped.joined.size()) +
                ", \"regroup_seconds\": " + format("%.3f", r.regrouped.seconds.count()) +
                ", \"first_step_seconds\": " + format("%.3f", seconds) + ", \"lost\": [" + ranks + "]}");
}

// Too few ranks, or no majority: the member with the newest state writes a snapshot of it, and every member ends,
// for a restart that resumes from it (bit for bit, as from any snapshot). That member also marks the group file as
// ended: a replacement waiting to join this run (ddp-restart started one for a task that failed) then leaves at
// once, rather than after twice --timeout for a rank 0 that is gone, and the restart is not held up by it.
void Trainer::fall_back(const Regrouped& regrouped, const std::string& why) {
  const std::string lost = describe_lost(regrouped.lost);
  std::string message = (lost.empty() ? std::string("no rank") : lost) +
                        (regrouped.lost.size() == 1 ? " was" : " were") + " lost (" + first_line(why) + "); " +
                        regrouped.verdict + ": training cannot go on in place";
  if (regrouped.source_is_me) {
    SnapshotStore& store = snapshot_store();
    store.wait();
    const std::string path = store.save(live_content());
    console_.line("Epoch " + std::to_string(progress_.epochs_run) + " | Training snapshot saved at " + path);
    message += "; this rank wrote a snapshot of step " + std::to_string(progress_.global_step) + " (" + path +
               "): restart the step to resume from it";
    mark_group_ended(store);
  } else {
    message += "; the rank with the newest state writes a snapshot of step " + std::to_string(regrouped.source_step) +
               ": restart the step to resume from it";
  }
  throw std::runtime_error(message);
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

// Recovery in place: Gloo only (an NCCL communicator needs aborting, which this runtime does not do yet; MPI ends
// the job at a rank's failure by design). The probe and join window bound what a silent member costs the others.
RecoverySettings recovery_settings(const TrainOptions& options) {
  RecoverySettings settings;
  settings.run_id = options.run_id;
  settings.min_ranks = options.min_ranks;
  settings.timeout = std::chrono::milliseconds(static_cast<int64_t>(options.timeout_seconds * 1000));
  settings.probe = std::min(settings.probe, settings.timeout);
  settings.group_file = options.snapshot_dir + "/" + group_file_name(options.run_id);
  return settings;
}

void require_gloo(const std::string& backend) {
  if (backend != "gloo") {
    throw Error("--recover in-place needs the Gloo backend, and this run uses " + backend +
                "; use --backend gloo, or --recover none (DDP_RECOVER)");
  }
}

// LibTorch 1.13's TCPStore client runs a listener thread (for watchKey) that ends the whole process (std::terminate)
// when the host of its store dies; recovery in place keeps every rank connected to stores that die with their hosts.
// LibTorch 2.x has no such thread.
void require_libtorch_2() {
#if !DDP_TORCH_AT_LEAST(2, 0)
  throw Error("--recover in-place needs LibTorch 2.0 or newer, and this ddp-train is built with LibTorch " +
              std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) +
              ", whose store client ends the process when another rank's node dies; use --recover none (DDP_RECOVER) "
              "with ddp-restart, or a ddp-train built with LibTorch 2.x");
#endif
}

std::unique_ptr<Recovery> start_recovery(const TrainOptions& options, const Launch& launch, Distributed& dist) {
  if (options.recover != RecoverMode::InPlace) return nullptr;
  require_gloo(dist.backend);
  return std::make_unique<Recovery>(launch, dist, recovery_settings(options));
}

// A replacement (--join): it builds its model and data set as the others did, alone (no collective yet), then asks
// the running group's rank 0 to take it in, and trains on from the state rank 0 sends.
int run_replacement(const TrainOptions& options, const Launch& launch, const JobFactory& make_job) {
  require_libtorch_2();
  if (options.backend && *options.backend != Backend::Gloo && *options.backend != Backend::Auto) {
    require_gloo(to_string(*options.backend));
  }
  Distributed dist;
  dist.backend = "gloo";
  dist.local_rank = launch.local_rank;
  at::manual_seed(options.seed);
  TrainingJob job = make_job(options);
  check_job(job, options, dist.device);
  const std::unique_ptr<Recovery> recovery = Recovery::replacement(launch, dist, recovery_settings(options));
  Console console;
  const Regrouped joined =
      recovery->join(options.snapshot_dir + "/" + group_file_name(options.run_id),
                     [&console](const std::string& what) { console.line("Replacement: " + what); });
  for (const std::string& refusal : joined.refused) console.warn(refusal);
  StragglerMonitor straggler(dist, recovery->ranks(), {options.straggler_threshold_pct, options.json},
                             [&console](const std::string& line) { console.line(line); });
  Trainer trainer(dist, options, job, nullptr, console, straggler, recovery.get());
  return trainer.train(joined);
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
