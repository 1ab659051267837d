#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>

#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>

#include "container.hpp"
#include "ddp_runtime/distributed_model.hpp"
#include "ddp_runtime/error_message.hpp"
#include "ddp_runtime/failure_report.hpp"
#include "ddp_runtime/mpi_bootstrap.hpp"
#include "ddp_runtime/optimizer.hpp"
#include "ddp_runtime/peer_check.hpp"
#include "ddp_runtime/process_group.hpp"
#include "ddp_runtime/sampler.hpp"
#include "ddp_runtime/snapshot.hpp"
#include "ddp_runtime/stop_request.hpp"
#include "ddp_runtime/straggler.hpp"
#include "ddp_runtime/tensor_text.hpp"
#include "ddp_runtime/train.hpp"
#include "error.hpp"

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

// Lines of the training thread and of the snapshot writer thread never interleave.
class Console {
 public:
  void line(const std::string& text) { write(stdout, text); }
  void warn(const std::string& text) { write(stderr, "ddp-train: warning: " + text); }

 private:
  void write(FILE* stream, const std::string& text) {
    const std::string line = text + "\n";
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

void check_loss_fits(const TrainingJob& job, const at::Tensor& output, const at::Tensor& targets) {
  const std::string loss = std::string("--loss ") + to_string(job.loss);
  const std::string outputs = job.model_name + " outputs " + tensor_text(output) + " for a batch of " +
                              std::to_string(targets.size(0)) + " and the targets 'y' of " + job.data->name() +
                              " are " + tensor_text(targets);
  if (!output.is_floating_point()) throw Error(outputs + "; a loss needs floating-point outputs");
  if (job.loss == LossKind::MeanSquaredError) {
    if (!targets.is_floating_point() || targets.sizes() != output.sizes()) {
      throw Error(outputs + "; " + loss +
                  " needs floating-point targets shaped like the output (class indices take "
                  "--loss cross-entropy or nll)");
    }
    return;
  }
  std::vector<int64_t> class_shape = output.sizes().vec();
  if (output.dim() >= 2) class_shape.erase(class_shape.begin() + 1);
  const bool indices = !targets.is_floating_point() && output.dim() >= 2 && targets.sizes().vec() == class_shape;
  const bool probabilities = job.loss == LossKind::CrossEntropy && targets.is_floating_point() && output.dim() >= 2 &&
                             targets.sizes() == output.sizes();
  if (!indices && !probabilities) {
    throw Error(outputs + "; " + loss +
                " needs outputs [batch, classes, ...] and class indices [batch, ...] (an integer "
                "type)" +
                (job.loss == LossKind::CrossEntropy ? " or class probabilities shaped like the output" : ""));
  }
  if (indices) {
    const int64_t classes = output.size(1);
    job.data->check_class_labels(classes);
    const int64_t low = targets.min().item<int64_t>();
    const int64_t high = targets.max().item<int64_t>();
    if (low < 0 || high >= classes) {
      throw Error(job.data->name() + " holds the class index " + std::to_string(low < 0 ? low : high) + ", but " +
                  job.model_name + " outputs " + std::to_string(classes) + " classes; expected indices 0 to " +
                  std::to_string(classes - 1));
    }
  }
}

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
  Trainer(const Distributed& dist, const TrainOptions& options, TrainingJob& job, SnapshotStore* store,
          Console& console, StragglerMonitor& straggler)
      : dist_(dist),
        options_(options),
        job_(job),
        model_(*job.model),
        parameters_(model_.named_parameters()),
        optimizer_(tensors_of(parameters_), options.optimizer),
        sampler_(job.data->size(), dist.world_size, dist.rank, true, options.seed),
        store_(store),
        has_buffers_(!model_.named_buffers().empty()),
        console_(console),
        straggler_(straggler) {
    progress_.seed = options.seed;
    progress_.world_size = dist.world_size;
    progress_.batch_size = options.batch_size;
    const int64_t batches = (sampler_.num_samples() + options.batch_size - 1) / options.batch_size;
    total_steps_ = options.total_epochs * ((batches + options.accumulate - 1) / options.accumulate);
  }

  void restore(const LoadedSnapshot& snapshot);
  int train();

 private:
  bool run_epoch(int64_t epoch);
  void run_step(const at::Tensor& order, int64_t epoch, int64_t first_batch, int64_t batches);
  bool stop_agreed(Seconds step_time);
  void after_step(int64_t epoch, bool epoch_end);
  SnapshotContent live_content();
  std::string rank_label() const;
  void finish();

  const Distributed& dist_;
  const TrainOptions& options_;
  TrainingJob& job_;
  Model& model_;
  NamedTensors parameters_;
  Optimizer optimizer_;
  DistributedSampler sampler_;
  std::unique_ptr<DistributedModel> ddp_;
  SnapshotStore* store_;  // rank 0 only
  bool has_buffers_;
  Console& console_;
  StragglerMonitor& straggler_;
  TrainingProgress progress_;
  int64_t total_steps_ = 0;
  Clock::time_point last_snapshot_ = Clock::now();
  int64_t stop_poll_steps_ = 1;
  Seconds poll_window_{0};
  int64_t poll_window_steps_ = 0;
  at::Tensor epoch_loss_;  // sum of the batches' mean losses, kept on the device until the epoch ends
  int64_t epoch_batches_ = 0;
  int64_t epoch_samples_ = 0;
  int64_t run_samples_ = 0;
};

void Trainer::restore(const LoadedSnapshot& snapshot) {
  const SnapshotContent& saved = snapshot.content;
  check_fits(model_state(model_), snapshot, job_.model_name);
  const bool has_progress = saved.progress.world_size > 0;
  if (has_progress && saved.progress.seed != options_.seed) {
    throw Error("snapshot " + snapshot.path + " was written with --seed " + std::to_string(saved.progress.seed) +
                ", this run has --seed " + std::to_string(options_.seed) + "; pass --seed " +
                std::to_string(saved.progress.seed) + " to resume it, or use another --snapshot-dir");
  }
  if (saved.optimizer) optimizer_.load(*saved.optimizer, "snapshot " + snapshot.path);
  {
    c10::NoGradGuard no_grad;
    for (auto& [name, tensor] : model_state(model_)) tensor.copy_(*find_tensor(saved.model_state, name));
  }
  if (saved.rng_state.defined()) {
    at::Generator generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(saved.rng_state);
  }
  progress_.epochs_run = saved.progress.epochs_run;
  progress_.global_step = saved.progress.global_step;
  progress_.batches_done = saved.progress.batches_done;
  const bool same_layout =
      saved.progress.world_size == dist_.world_size && saved.progress.batch_size == options_.batch_size;
  if (progress_.batches_done > 0 && !same_layout) {
    console_.warn("snapshot " + snapshot.path + " stopped inside epoch " + std::to_string(progress_.epochs_run) +
                  " with another world size or batch size; that epoch restarts from its first batch");
    progress_.batches_done = 0;
  }
  if (dist_.rank == 0) {
    console_.line("Resuming training from snapshot at Epoch " + std::to_string(progress_.epochs_run) + " (" +
                  snapshot.path + ")");
  }
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
void Trainer::run_step(const at::Tensor& order, int64_t epoch, int64_t first_batch, int64_t batches) {
  if (store_ != nullptr && has_buffers_) store_->before_update();
  zero_gradients(tensors_of(parameters_));
  const int64_t size = order.size(0);
  for (int64_t b = 0; b < batches; ++b) {
    const int64_t start = (first_batch + b) * options_.batch_size;
    const Batch batch = job_.data->get_batch(order.slice(0, start, std::min(start + options_.batch_size, size)));
    const at::Tensor input = batch.inputs.to(dist_.device);
    const at::Tensor target = batch.targets.to(dist_.device);
    // Gradient accumulation: only the step's last batch synchronises, as under DDP's no_sync().
    std::optional<DistributedModel::NoSync> accumulate_only;
    if (b + 1 < batches) accumulate_only.emplace(*ddp_);
    const at::Tensor output = ddp_->forward([&] { return model_.forward(input); });
    const at::Tensor loss = compute_loss(job_.loss, output, target);
    epoch_loss_ = epoch_loss_.defined() ? epoch_loss_ + loss.detach() : loss.detach();
    epoch_samples_ += input.size(0);
    ++epoch_batches_;
    (batches > 1 ? loss / static_cast<double>(batches) : loss).backward();
  }
  if (store_ != nullptr) store_->before_update();
  straggler_.backward_finished();
  optimizer_.set_lr(scheduled_lr(options_.optimizer, progress_.global_step, epoch, total_steps_));
  optimizer_.step();
}

// All ranks must stop at the same step, or the ones still training would wait for the others forever.
bool Trainer::stop_agreed(Seconds step_time) {
  if (dist_.world_size == 1) return stop_requested();
  poll_window_ += step_time;
  ++poll_window_steps_;
  if (progress_.global_step % stop_poll_steps_ != 0) return false;
  const double mean_step = poll_window_.count() / static_cast<double>(poll_window_steps_);
  const double proposal = std::clamp(kStopPollSeconds / std::max(mean_step, 1e-9), 1.0, double(kMaxStopPollSteps));
  at::Tensor votes =
      at::tensor({stop_requested() ? 1.0 : 0.0, dist_.rank == 0 ? std::floor(proposal) : 0.0}, at::kDouble);
  all_reduce_sum(dist_, votes);
  stop_poll_steps_ = std::max<int64_t>(1, static_cast<int64_t>(votes[1].item<double>()));
  poll_window_ = Seconds(0);
  poll_window_steps_ = 0;
  return votes[0].item<double>() > 0;
}

void Trainer::after_step(int64_t epoch, bool epoch_end) {
  if (store_ == nullptr) return;
  store_->check_failures();
  const bool epoch_due = epoch_end && options_.save_every > 0 && epoch % options_.save_every == 0;
  const bool time_due = options_.snapshot_every_seconds > 0 &&
                        Seconds(Clock::now() - last_snapshot_).count() >= options_.snapshot_every_seconds;
  if (!epoch_due && !time_due) return;
  last_snapshot_ = Clock::now();
  const std::string where =
      epoch_end ? "Epoch " + std::to_string(epoch)
                : "Epoch " + std::to_string(epoch) + " (batch " + std::to_string(progress_.batches_done) + ")";
  store_->save_async(live_content(), [this, where](const std::string& path) {
    console_.line(where + " | Training snapshot saved at " + path);
  });
}

bool Trainer::run_epoch(int64_t epoch) {
  sampler_.set_epoch(epoch);
  const std::vector<int64_t> indices = sampler_.indices();
  const at::Tensor order = at::tensor(indices, at::kLong);
  const auto batches = static_cast<int64_t>((indices.size() + options_.batch_size - 1) / options_.batch_size);
  console_.line(rank_label() + " Epoch " + std::to_string(epoch) +
                " | Batchsize: " + std::to_string(options_.batch_size) + " | Steps: " + std::to_string(batches));
  const auto epoch_start = Clock::now();
  epoch_loss_ = at::Tensor();
  epoch_batches_ = 0;
  epoch_samples_ = 0;
  for (int64_t batch = progress_.batches_done; batch < batches;) {
    const auto step_start = Clock::now();
    const int64_t count = std::min<int64_t>(options_.accumulate, batches - batch);
    straggler_.step_started();
    run_step(order, epoch, batch, count);
    straggler_.step_finished();
    batch += count;
    ++progress_.global_step;
    const bool epoch_end = batch == batches;
    progress_.epochs_run = epoch_end ? epoch + 1 : epoch;
    progress_.batches_done = epoch_end ? 0 : batch;
    after_step(epoch, epoch_end);
    if (stop_agreed(Clock::now() - step_start)) return false;
  }
  const double seconds = Seconds(Clock::now() - epoch_start).count();
  run_samples_ += epoch_samples_ * dist_.world_size;
  if (dist_.rank == 0 && epoch_samples_ > 0) {
    const double rate = static_cast<double>(epoch_samples_ * dist_.world_size) / seconds;
    const double loss = epoch_loss_.item<double>() / static_cast<double>(epoch_batches_);
    console_.line("Epoch " + std::to_string(epoch) + " | Loss: " + format("%.6f", loss) +
                  " | Samples/s: " + format("%.0f", rate) +
                  " | ETA: " + duration_text(seconds * double(options_.total_epochs - epoch - 1)));
  }
  straggler_.end_epoch(epoch);
  return true;
}

void Trainer::finish() {
  if (store_ == nullptr) return;
  store_->wait();
  write_model_file(options_.output, model_state(model_));
  console_.line("Final model saved at " + options_.output);
  if (model_.write_torchscript(options_.output_script)) {
    console_.line("TorchScript model saved at " + options_.output_script);
  }
}

int Trainer::train() {
  const auto cap = static_cast<int64_t>(options_.bucket_cap_mb * (1 << 20));
  // Gradients as bucket views: one copy of the gradients less each way per step (5% on the MLP-1024 bench).
  ddp_ = std::make_unique<DistributedModel>(
      parameters_, tensors_of(model_.named_buffers()), dist_,
      DdpOptions{static_cast<int64_t>(cap), std::min<int64_t>(static_cast<int64_t>(cap), kFirstBucketBytes), true});
  straggler_.attach(tensors_of(parameters_));
  const auto start = Clock::now();
  const int64_t first_epoch = progress_.epochs_run;
  for (int64_t epoch = first_epoch; epoch < options_.total_epochs; ++epoch) {
    if (run_epoch(epoch)) continue;
    if (store_ != nullptr) {
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

// With the MPI group, the other ranks would wait in their next collective: the job ends here.
// The error also goes to TORCHELASTIC_ERROR_FILE, where ddp-why and srun --ddp find it.
int fail(const std::string& program, int status, const std::string& message) {
  std::fprintf(stderr, "%s: %s\n", program.c_str(), message.c_str());
  std::string why;
  if (!write_error_report(message, status, process_environment(), &why)) {
    std::fprintf(stderr, "%s: warning: %s\n", program.c_str(), why.c_str());
  }
  std::fflush(stderr);
  abort_mpi_job(status);
  return status;
}

}  // namespace

int run_training(const TrainOptions& options, const Launch& launch, const JobFactory& make_job) {
  limit_threads(launch);
  install_signal_handlers();
  const Distributed dist =
      init_distributed(launch, options.backend.value_or(launch.backend),
                       std::chrono::milliseconds(static_cast<int64_t>(options.timeout_seconds * 1000)));
  Console console;
  StragglerMonitor straggler(dist, gather_identities(dist), {options.straggler_threshold_pct, options.json},
                             [&console](const std::string& line) { console.line(line); });
  TrainingJob job = prepare_job(dist, options, make_job);
  std::unique_ptr<SnapshotStore> store;
  const std::optional<LoadedSnapshot> start = agree_on_start(dist, options, store, console);
  Trainer trainer(dist, options, job, store.get(), console, straggler);
  if (start) trainer.restore(*start);
  int status = 0;
  try {
    status = trainer.train();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    // A stopped or hung peer fails every other rank's collective at the timeout: name it (peer_check.hpp).
    const auto window = std::min(kPeerCheckWindow + 2 * straggler.mean_step(), kPeerCheckMaxWindow);
    throw std::runtime_error(explain_peer_failure(launch, dist.backend, straggler.ranks(), error_message(e), window));
  }
  finalize_mpi();
  return status;
}

int train_main(int argc, char** argv, const JobFactory& make_job) {
  const std::string path = argc > 0 ? argv[0] : "ddp-train";
  const std::string program = path.substr(path.rfind('/') + 1);
  try {
    const EnvLookup env = process_environment();
    const TrainOptions options = parse_train_args(std::vector<std::string>(argv + 1, argv + argc), env);
    if (options.help) {
      std::fputs(train_usage(), stdout);
      return 0;
    }
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

}  // namespace ddp::runtime
