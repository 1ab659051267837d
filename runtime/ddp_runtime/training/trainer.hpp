#pragma once
// ddp-train's training, in three parts that share what this header declares. train_main.cpp: the command line to a
// configured run (the checks before the first step, the snapshot every rank starts from, exit statuses and the error
// file). trainer.cpp: the Trainer's loop (epochs, steps, snapshots, the vote at step boundaries). trainer_recovery.cpp:
// what connects the Trainer to recovery in place (regroup, heal from rank 0, replacements, the fallback snapshot).
// Private to the runtime: the API is train.hpp.
#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/launch.hpp"
#include "core/redact.hpp"
#include "ddp_runtime/data/sampler.hpp"
#include "ddp_runtime/distributed/distributed_model.hpp"
#include "ddp_runtime/distributed/process_group.hpp"
#include "ddp_runtime/distributed/recovery.hpp"
#include "ddp_runtime/snapshots/snapshot.hpp"
#include "ddp_runtime/train.hpp"
#include "ddp_runtime/training/optimizer.hpp"
#include "ddp_runtime/training/straggler.hpp"

namespace ddp::runtime {

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

// `value` written with printf's `pattern` ("%.2f"), for the console's lines.
std::string format(const char* pattern, double value);

// The model's forward and the loss on the first batch; throws ddp::Error naming what does not fit (train_main.cpp).
void check_job(TrainingJob& job, const TrainOptions& options, c10::Device device);

// When this process started, by the kernel's record (trainer_recovery.cpp, as the three below).
std::chrono::steady_clock::time_point process_start();
// Throws ddp::Error when this LibTorch cannot recover in place: its store client ends the process at a node's death.
void require_libtorch_2();
// The run's Recovery with --recover in-place, else nullptr; throws ddp::Error for a backend other than Gloo.
std::unique_ptr<Recovery> start_recovery(const TrainOptions& options, const Launch& launch, Distributed& dist);
// What train_main runs once the command line and the environment are read: the process group, the job, the start
// (a snapshot or none), the Trainer; finalize MPI. Returns 0 when every epoch ran, kExitStopped after a stop request.
// Throws ddp::Error for bad input (on every rank alike) and std::exception for failures (train_main.cpp). Not in
// the API: a Launch is the runtime's own reading of the launcher's environment.
int run_training(const TrainOptions& options, const Launch& launch, const JobFactory& make_job);
// A replacement's whole run (--join): the running group takes it in, and it trains on with them; its exit status.
int run_replacement(const TrainOptions& options, const Launch& launch, const JobFactory& make_job);

// One rank's training from its first step to its last: the loop and its snapshots in trainer.cpp, its side of
// recovery in place in trainer_recovery.cpp.
class Trainer {
 public:
  using Clock = std::chrono::steady_clock;
  using Seconds = std::chrono::duration<double>;

  Trainer(Distributed& dist, const TrainOptions& options, TrainingJob& job, SnapshotStore* store, Console& console,
          StragglerMonitor& straggler, Recovery* recovery);

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
  // Recovery in place (recovery.hpp), in trainer_recovery.cpp.
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

}  // namespace ddp::runtime
