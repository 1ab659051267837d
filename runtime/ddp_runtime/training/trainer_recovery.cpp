#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/tensor.h>

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "base/json_string.hpp"
#include "core/error.hpp"
#include "ddp_runtime/common/c10d_compat.hpp"
#include "ddp_runtime/common/error_message.hpp"
#include "ddp_runtime/distributed/peer_check.hpp"
#include "ddp_runtime/snapshots/snapshot_files.hpp"
#include "ddp_runtime/training/trainer.hpp"

namespace ddp::runtime {
namespace {

using Clock = std::chrono::steady_clock;
using Seconds = std::chrono::duration<double>;

}  // namespace

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

namespace {

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

}  // namespace

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

}  // namespace ddp::runtime
