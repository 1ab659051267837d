#include "ddp_runtime/training/trainer.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.hpp"
#include "ddp_runtime/common/error_message.hpp"
#include "ddp_runtime/common/tensor_text.hpp"
#include "ddp_runtime/snapshots/snapshot_files.hpp"
#include "ddp_runtime/training/stop_request.hpp"
#include "ddp_runtime/training/workloads.hpp"

namespace ddp::runtime {
namespace {

// How long a stop request may wait for the ranks to agree on it, at most: the poll interval, in steps, is set
// from rank 0's step time so that polls (one small all-reduce each) stay rare.
constexpr double kStopPollSeconds = 0.5;
constexpr int64_t kMaxStopPollSteps = 10000;

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

int64_t step_samples(const std::vector<BatchSpan>& batches) {
  int64_t samples = 0;
  for (const BatchSpan& batch : batches) samples += batch.size;
  return samples;
}

}  // namespace

std::string format(const char* pattern, double value) {
  char text[64];
  std::snprintf(text, sizeof text, pattern, value);
  return text;
}

Trainer::Trainer(Distributed& dist, const TrainOptions& options, TrainingJob& job, SnapshotStore* store,
                 Console& console, StragglerMonitor& straggler, Recovery* recovery)
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

}  // namespace ddp::runtime
