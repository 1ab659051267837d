#pragma once
// Training snapshots: what they hold, their file format, and the store that writes them in the background.
//
// A snapshot is a dict saved in torch.save's zip format. It holds only dicts, lists, tuples, tensors, ints,
// floats, bools, None and strings, so that torch.load(path) reads it with PyTorch 2.6's default
// weights_only=True (and 1.13's weights_only=True) as plain Python values:
//   MODEL_STATE      {name: tensor}, the model's state_dict, keyed by the module's own parameter and buffer names
//                    (the seed script's key): model.load_state_dict(snapshot["MODEL_STATE"])
//   EPOCHS_RUN       the epoch to resume at (the seed script's key and meaning)
//   GLOBAL_STEP      optimizer steps taken
//   OPTIMIZER_STATE  the optimizer's state_dict() in torch.optim's own layout, one param group holding the
//                    model's parameters in order: SGD {"state": {i: {"momentum_buffer": t}}, "param_groups":
//                    [{"lr", "momentum", "weight_decay", ...}]}, AdamW {"state": {i: {"step": t, "exp_avg": t,
//                    "exp_avg_sq": t}}, "param_groups": [{"lr", "betas", "eps", "weight_decay", ...}]};
//                    optimizer.load_state_dict(snapshot["OPTIMIZER_STATE"]) continues the run
//   RNG_STATE        torch.get_rng_state() of rank 0
//   SAMPLER          {"seed", "epoch", "batches_done", "world_size", "batch_size"}: where in the epoch it stopped;
//                    after the world changed in place (recovery.hpp) also "layout_start" (samples of the epoch's
//                    order trained before the current layout), "schedule_step" (where the learning-rate schedule
//                    stands) and "planned_world" (the world size the schedule's steps were counted for)
//   FINGERPRINT      the model's parameter names and shapes, "weight:[1, 20] bias:[1]"
//   RUN_ID           the run that wrote it (snapshot_files.hpp), which its file name repeats
//   FORMAT           "ddp-train snapshot 2"
//   CHECKSUM         CRC-32 of everything above (see snapshot.cpp), verified on load
// A dict from Python (torch.save) loads too: MODEL_STATE (an OrderedDict state_dict is fine) and EPOCHS_RUN, as
// the seed script writes, plus OPTIMIZER_STATE, GLOBAL_STEP, RNG_STATE and SAMPLER where present.
#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "ddp_runtime/common/mapped_file.hpp"
#include "ddp_runtime/job.hpp"
#include "ddp_runtime/snapshots/snapshot_files.hpp"

namespace ddp::runtime {

struct TrainingProgress {
  int64_t epochs_run = 0;    // the epoch to resume at
  int64_t batches_done = 0;  // batches of that epoch already trained (a snapshot taken mid-epoch), per rank
  int64_t global_step = 0;
  uint64_t seed = 0;
  int64_t world_size = 0;  // of the epoch's current layout: the ranks batches_done counts for
  int64_t batch_size = 0;
  // 0: the epoch's layout is DistributedSampler's from its start; else the samples of the epoch's order trained
  // before the world changed mid-epoch, after which the rest was shared out again (sampler.hpp, plan_rest_of_epoch).
  int64_t layout_start = 0;
  // The learning-rate schedule's position, in steps of `planned_world` ranks: global_step until the world changes,
  // after which a step of W ranks counts as W / planned_world of a step, so that the schedule follows the samples.
  double schedule_step = 0;
  int64_t planned_world = 0;

  // Samples of the epoch's order trained so far (a step boundary inside the epoch).
  int64_t samples_done() const { return layout_start + batches_done * batch_size * world_size; }
};

// torch.optim's state_dict() of an optimizer whose one parameter group holds every parameter of the model.
struct OptimizerState {
  OptimizerKind kind = OptimizerKind::Sgd;
  double lr = 0.0;          // of the next step, after the schedule
  double initial_lr = 0.0;  // --lr (what torch.optim.lr_scheduler records as initial_lr)
  double momentum = 0.0;    // SGD
  double weight_decay = 0.0;
  double beta1 = 0.9;  // AdamW
  double beta2 = 0.999;
  double eps = 1e-8;
  // state[i] of parameter i, named as torch.optim names it: SGD {"momentum_buffer"}, AdamW {"step", "exp_avg",
  // "exp_avg_sq"}; empty before the parameter's first update.
  std::vector<NamedTensors> per_param;
};

struct SnapshotContent {
  NamedTensors model_state;
  std::optional<OptimizerState> optimizer;  // absent in a snapshot Python wrote without OPTIMIZER_STATE
  at::Tensor rng_state;                     // undefined in a seed-script snapshot
  TrainingProgress progress;
  std::string run_id;        // empty in a snapshot Python wrote
  bool from_python = false;  // not written by ddp-train (no FORMAT): no checksum, only what was there
};

// Reads the whole snapshot with one copy of its tensors in memory. Anything that does not load, lacks a field,
// has a malformed one or fails its checksum throws SnapshotCorrupt; an error the system reports while reading
// throws SnapshotUnreadable (snapshot_files.hpp).
SnapshotContent read_snapshot(const SnapshotFile& file);
SnapshotContent read_snapshot(const std::string& path);
// The same from a snapshot file's bytes already in memory (as rank 0 read them); `path` names them in messages.
SnapshotContent read_snapshot(const ByteView& bytes, const std::string& path);
// A snapshot's bytes, as a file would hold them: what a rank sends a peer that must take its state.
std::vector<char> snapshot_bytes(const SnapshotContent& content);

struct LoadedSnapshot {
  std::string path;
  SnapshotContent content;
  ByteView bytes;  // the file as it was read, which the content's tensors alias: what rank 0 hands the others
};
LoadedSnapshot load_snapshot(const SnapshotFile& file);
using Warn = std::function<void(const std::string& message)>;

std::string model_fingerprint(const NamedTensors& model_state);

// The final model: {name: tensor}, which model.load_state_dict(torch.load(path)) accepts. Written atomically.
void write_model_file(const std::string& path, const NamedTensors& model_state);

// Writes one run's snapshots into one directory, rank 0 only. save_async returns at once: a background thread copies
// the state into staging buffers that are kept from one snapshot to the next (fresh memory is expensive to
// touch for the first time), then serialises, checksums and writes. The caller keeps training and calls
// before_update() before it next changes a tensor of the state (the optimizer step), so that the copy
// overlaps the forward and backward passes; should the thread not have started the copy by then (busy
// cores), before_update makes it itself rather than wait for the thread to be scheduled. At most one write is
// in flight: the next save_async waits for it.
//
// A write that fails (a full disk, an I/O error) is reported through `warn` at once and training goes on; the next
// snapshot tries again. Once kMaxFailedSnapshots have failed in a row, check_failures() and save_async throw.
// Keep-K counts only this run's snapshots that it wrote or read back whole; older ones of this run left by an
// earlier process are read back before they are removed, and a corrupt one is set aside instead.
constexpr int kMaxFailedSnapshots = 3;

class SnapshotStore {
 public:
  // Opens the directory and proves it can hold a snapshot; throws ddp::Error naming it.
  SnapshotStore(const std::string& dir, int keep, const std::string& run_id, Warn warn);
  ~SnapshotStore();
  SnapshotStore(const SnapshotStore&) = delete;
  SnapshotStore& operator=(const SnapshotStore&) = delete;

  // This run's newest snapshot that loads whole and is what its name says; each corrupt one is set aside (renamed
  // "<name>.corrupt") with a warning and the next older one tried. Snapshots of other runs are left alone.
  std::optional<LoadedSnapshot> resume();

  using Saved = std::function<void(const std::string& path)>;
  // `saved` runs on the writer thread once the file is durable under its final name. The tensors of `live`
  // must not change until before_update() returns.
  void save_async(const SnapshotContent& live, Saved saved);
  // Returns once the last save_async has copied the state.
  void before_update();
  // Writes on the calling thread, straight from the live tensors (what torch.save does); returns the path.
  // Throws when the write fails.
  std::string save(const SnapshotContent& live);
  // Waits for the write in flight (whose failure its thread has reported).
  void wait();
  // Throws once kMaxFailedSnapshots writes in a row have failed; cheap enough for every step.
  void check_failures();
  // A small file of the run beside the snapshots (recovery.hpp's group file), written atomically; throws on failure.
  void write_file(const std::string& name, const std::string& text);

  const std::string& dir() const { return files_.dir(); }
  // Time save_async and before_update kept their caller from training, in total, and how many snapshots.
  std::chrono::duration<double> blocked() const { return blocked_; }
  int async_saves() const { return async_saves_; }

 private:
  std::string write(const SnapshotContent& content);
  void prune();
  std::string set_aside(const SnapshotName& name) const;  // what became of it, for a warning

  SnapshotFiles files_;
  std::size_t keep_;
  Warn warn_;
  struct Kept {
    SnapshotName name;
    bool verified = false;  // written by this process or read back whole
  };
  std::vector<Kept> kept_;                         // this run's snapshots, newest first
  int record_failure(const std::string& failure);  // "" for a success; returns the failures in a row
  std::mutex failure_mutex_;                       // the writer thread records, the training thread checks
  int failures_in_a_row_ = 0;
  std::string last_failure_;
  SnapshotContent staging_;
  struct StagingJob;
  void stage_once(StagingJob& job);

  std::future<void> in_flight_;
  std::shared_ptr<StagingJob> pending_;  // the copy of the last save_async, until before_update
  std::chrono::duration<double> blocked_{0};
  int async_saves_ = 0;
};

}  // namespace ddp::runtime
