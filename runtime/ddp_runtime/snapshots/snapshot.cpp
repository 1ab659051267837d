#include "ddp_runtime/snapshots/snapshot.hpp"

#include <ATen/Functions.h>
#include <ATen/core/Dict.h>
#include <ATen/core/List.h>
#include <c10/core/GradMode.h>
#include <zlib.h>

#include <algorithm>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "base/parse.hpp"
#include "core/error.hpp"
#include "ddp_runtime/common/c10d_compat.hpp"
#include "ddp_runtime/common/error_message.hpp"
#include "ddp_runtime/snapshots/optimizer_table.hpp"
#include "ddp_runtime/snapshots/pickle_reader.hpp"
#include "ddp_runtime/snapshots/saved_value.hpp"
#include "ddp_runtime/snapshots/snapshot_files.hpp"
#include "ddp_runtime/train_options.hpp"

namespace ddp::runtime {
namespace {

constexpr char kFormat[] = "ddp-train snapshot 2";
using Clock = std::chrono::steady_clock;
using GenericDict = c10::impl::GenericDict;
using GenericList = c10::impl::GenericList;

GenericDict string_dict() { return GenericDict(c10::StringType::get(), c10::AnyType::get()); }

// CRC-32 over a canonical walk of the content, so that Python (zlib.crc32) could recompute it and so that it
// does not depend on how the pickler lays out the file.
class Checksum {
 public:
  void add(const void* data, std::size_t size) { crc_ = crc32_z(crc_, static_cast<const Bytef*>(data), size); }
  void add(int64_t value) { add(&value, sizeof value); }
  void add(double value) { add(&value, sizeof value); }
  void add(const std::string& text) {
    add(static_cast<int64_t>(text.size()));
    add(text.data(), text.size());
  }
  void add(const at::Tensor& tensor) {
    if (!tensor.defined()) return add(int64_t{-1});
    add(std::string(c10::toString(tensor.scalar_type())));
    for (const int64_t size : tensor.sizes()) add(size);
    const at::Tensor bytes = tensor.cpu().contiguous();
    add(bytes.data_ptr(), bytes.nbytes());
  }
  void add(const NamedTensors& tensors) {
    add(static_cast<int64_t>(tensors.size()));
    for (const auto& [name, tensor] : tensors) {
      add(name);
      add(tensor);
    }
  }
  int64_t value() const { return static_cast<int64_t>(crc_); }

 private:
  uLong crc_ = crc32_z(0, nullptr, 0);
};

bool changed_world(const TrainingProgress& p) {
  return p.layout_start != 0 || p.schedule_step != static_cast<double>(p.global_step) ||
         (p.planned_world != 0 && p.planned_world != p.world_size);
}

int64_t checksum(const SnapshotContent& c) {
  Checksum sum;
  sum.add(std::string(kFormat));
  sum.add(c.model_state);
  const OptimizerState& o = *c.optimizer;
  sum.add(static_cast<int64_t>(o.kind));
  for (const double value : {o.lr, o.initial_lr, o.weight_decay}) sum.add(value);
  for (const double value : optimizer_entry(o.kind).hyperparameters(o)) sum.add(value);
  sum.add(static_cast<int64_t>(o.per_param.size()));
  for (const NamedTensors& state : o.per_param) sum.add(state);
  sum.add(c.rng_state);
  const TrainingProgress& p = c.progress;
  for (const int64_t value :
       {p.epochs_run, p.batches_done, p.global_step, static_cast<int64_t>(p.seed), p.world_size, p.batch_size}) {
    sum.add(value);
  }
  // Only after the world changed in place: the checksums of other snapshots stay what they were.
  if (changed_world(p)) {
    sum.add(p.layout_start);
    sum.add(p.schedule_step);
    sum.add(p.planned_world);
  }
  sum.add(c.run_id);
  return sum.value();
}

GenericDict param_group(const OptimizerState& o) {
  GenericDict group = string_dict();
  group.insert("lr", o.lr);
  optimizer_entry(o.kind).write_group(group, o);
  group.insert("initial_lr", o.initial_lr);
  GenericList params(c10::AnyType::get());
  for (std::size_t i = 0; i < o.per_param.size(); ++i) params.push_back(static_cast<int64_t>(i));
  group.insert("params", params);
  return group;
}

// Always CPU tensors: a GPU tensor would be pickled with its device ("cuda:0"), which torch.load on a machine
// without a GPU refuses. cpu() copies only a GPU tensor (the synchronous save and the final model; save_async's
// staged copies are already on the CPU).
GenericDict tensor_dict(const NamedTensors& entries) {
  GenericDict dict = string_dict();
  for (const auto& [name, tensor] : entries) dict.insert(name, tensor.detach().cpu());
  return dict;
}

GenericDict optimizer_dict(const OptimizerState& o) {
  GenericDict state(c10::IntType::get(), c10::AnyType::get());
  for (std::size_t i = 0; i < o.per_param.size(); ++i) {
    if (!o.per_param[i].empty()) state.insert(static_cast<int64_t>(i), tensor_dict(o.per_param[i]));
  }
  GenericList groups(c10::AnyType::get());
  groups.push_back(param_group(o));
  GenericDict optimizer = string_dict();
  optimizer.insert("state", state);
  optimizer.insert("param_groups", groups);
  return optimizer;
}

GenericDict sampler_dict(const TrainingProgress& p) {
  GenericDict sampler = string_dict();
  sampler.insert("seed", static_cast<int64_t>(p.seed));
  sampler.insert("epoch", p.epochs_run);
  sampler.insert("batches_done", p.batches_done);
  sampler.insert("world_size", p.world_size);
  sampler.insert("batch_size", p.batch_size);
  if (changed_world(p)) {
    sampler.insert("layout_start", p.layout_start);
    sampler.insert("schedule_step", p.schedule_step);
    sampler.insert("planned_world", p.planned_world);
  }
  return sampler;
}

GenericDict to_dict(const SnapshotContent& c) {
  GenericDict dict = string_dict();
  dict.insert("MODEL_STATE", tensor_dict(c.model_state));
  dict.insert("EPOCHS_RUN", c.progress.epochs_run);
  dict.insert("GLOBAL_STEP", c.progress.global_step);
  dict.insert("OPTIMIZER_STATE", optimizer_dict(*c.optimizer));
  dict.insert("RNG_STATE", c.rng_state);
  dict.insert("SAMPLER", sampler_dict(c.progress));
  dict.insert("FINGERPRINT", model_fingerprint(c.model_state));
  dict.insert("RUN_ID", c.run_id);
  dict.insert("FORMAT", std::string(kFormat));
  dict.insert("CHECKSUM", checksum(c));
  return dict;
}

// Ours, or one Python's optimizer.state_dict() wrote: the state of parameter params[p] is under key params[p].
OptimizerState optimizer_from(const GenericDict& optimizer, const std::string& path) {
  const auto groups = saved_entry(optimizer, "param_groups", path).toList();
  if (groups.size() != 1) {
    throw SnapshotCorrupt(path + ": the optimizer has " + std::to_string(groups.size()) +
                          " param groups; ddp-train uses one");
  }
  const GenericDict group = groups.get(0).toGenericDict();
  OptimizerState o;
  const OptimizerEntry& saved = optimizer_entry_of_group(group, path);
  o.kind = saved.kind;
  o.lr = saved_number(saved_entry(group, "lr", path), "lr", path);
  o.initial_lr = group.contains("initial_lr") ? saved_number(group.at("initial_lr"), "initial_lr", path) : o.lr;
  o.weight_decay = saved_number(saved_entry(group, "weight_decay", path), "weight_decay", path);
  saved.read_group(group, o, path);
  const auto params = saved_entry(group, "params", path).toList();
  o.per_param.resize(params.size());
  for (const auto& item : saved_entry(optimizer, "state", path).toGenericDict()) {
    std::size_t p = 0;
    while (p < params.size() &&
           !(params.get(p).isInt() && item.key().isInt() && params.get(p).toInt() == item.key().toInt())) {
      ++p;
    }
    if (p == params.size()) throw SnapshotCorrupt(path + ": optimizer state for a parameter not in its param group");
    for (const auto& field : item.value().toGenericDict()) {
      const std::string& name = field.key().toStringRef();
      const c10::IValue& value = field.value();
      if (value.isTensor()) {
        o.per_param[p].emplace_back(name, value.toTensor());
      } else if (!value.isNone()) {  // PyTorch before 1.12 kept AdamW's step as a number
        o.per_param[p].emplace_back(name, at::scalar_tensor(saved_number(value, name, path), at::kFloat));
      }
    }
  }
  return o;
}

void read_progress(const GenericDict& dict, const std::string& path, SnapshotContent& c) {
  c.progress.global_step = saved_entry(dict, "GLOBAL_STEP", path).toInt();
  const GenericDict sampler = saved_entry(dict, "SAMPLER", path).toGenericDict();
  c.progress.seed = static_cast<uint64_t>(sampler.at("seed").toInt());
  c.progress.batches_done = sampler.at("batches_done").toInt();
  c.progress.world_size = sampler.at("world_size").toInt();
  c.progress.batch_size = sampler.at("batch_size").toInt();
  c.progress.layout_start = sampler.contains("layout_start") ? sampler.at("layout_start").toInt() : 0;
  c.progress.schedule_step = sampler.contains("schedule_step")
                                 ? saved_number(sampler.at("schedule_step"), "schedule_step", path)
                                 : static_cast<double>(c.progress.global_step);
  // Written only when it differs from the layout's world (a world that changed in place).
  c.progress.planned_world =
      sampler.contains("planned_world") ? sampler.at("planned_world").toInt() : c.progress.world_size;
}

SnapshotContent from_dict(const GenericDict& dict, const std::string& path) {
  SnapshotContent c;
  for (const auto& item : saved_entry(dict, "MODEL_STATE", path).toGenericDict()) {
    c.model_state.emplace_back(item.key().toStringRef(), item.value().toTensor());
  }
  c.progress.epochs_run = saved_entry(dict, "EPOCHS_RUN", path).toInt();
  c.from_python = !dict.contains("FORMAT");
  if (c.from_python) {
    // A run that Python continued: what it saved of ours is used, the rest starts afresh.
    if (dict.contains("OPTIMIZER_STATE"))
      c.optimizer = optimizer_from(dict.at("OPTIMIZER_STATE").toGenericDict(), path);
    if (dict.contains("RNG_STATE")) c.rng_state = dict.at("RNG_STATE").toTensor();
    if (dict.contains("GLOBAL_STEP") && dict.contains("SAMPLER")) read_progress(dict, path, c);
    return c;
  }
  const std::string format = saved_entry(dict, "FORMAT", path).toStringRef();
  if (format != kFormat) {
    throw SnapshotCorrupt(path + " is in the format '" + format + "' of another ddp-train version; this one reads '" +
                          kFormat + "'");
  }
  c.optimizer = optimizer_from(saved_entry(dict, "OPTIMIZER_STATE", path).toGenericDict(), path);
  c.rng_state = saved_entry(dict, "RNG_STATE", path).toTensor();
  read_progress(dict, path, c);
  c.run_id = saved_entry(dict, "RUN_ID", path).toStringRef();
  if (saved_entry(dict, "CHECKSUM", path).toInt() != checksum(c)) throw SnapshotCorrupt(path + " fails its checksum");
  return c;
}

// The whole file, read once: the tensors read from it alias these bytes. Throws SnapshotUnreadable on a read error.
ByteView file_bytes(const SnapshotFile& file) {
  std::vector<char> bytes(static_cast<std::size_t>(file.size()));
  if (file.read_some(0, bytes.data(), bytes.size()) != bytes.size()) {
    throw SnapshotCorrupt(file.path() + " is not a whole snapshot: it ends before the size it had when opened");
  }
  return bytes_in_memory(std::move(bytes));
}

// Reuses the slot when the shape and type still fit: only the first snapshot pays for fresh memory.
void stage(at::Tensor& slot, const at::Tensor& live) {
  if (!live.defined()) {
    slot = at::Tensor();
    return;
  }
  if (!slot.defined() || slot.sizes() != live.sizes() || slot.scalar_type() != live.scalar_type()) {
    slot = at::empty(live.sizes(), live.options().device(at::kCPU).pinned_memory(live.is_cuda()));
  }
  slot.copy_(live.detach());
}

void stage(NamedTensors& staged, const NamedTensors& live) {
  staged.resize(live.size());
  for (std::size_t i = 0; i < live.size(); ++i) {
    staged[i].first = live[i].first;
    stage(staged[i].second, live[i].second);
  }
}

void stage(SnapshotContent& staged, const SnapshotContent& live) {
  stage(staged.model_state, live.model_state);
  if (!live.optimizer) {
    staged.optimizer.reset();
  } else {
    std::vector<NamedTensors> slots =
        staged.optimizer ? std::move(staged.optimizer->per_param) : std::vector<NamedTensors>();
    staged.optimizer = *live.optimizer;
    slots.resize(live.optimizer->per_param.size());
    for (std::size_t i = 0; i < slots.size(); ++i) stage(slots[i], live.optimizer->per_param[i]);
    staged.optimizer->per_param = std::move(slots);
  }
  stage(staged.rng_state, live.rng_state);
  staged.progress = live.progress;
  staged.run_id = live.run_id;
}

}  // namespace

SnapshotContent read_snapshot(const ByteView& bytes, const std::string& path) {
  c10::IValue value;
  try {
    value = read_torch_save(bytes);
  } catch (const std::bad_alloc&) {
    throw;  // not the file's fault: it must not be set aside
  } catch (const std::exception& e) {
    // UnreadableArchive, and c10::Error from tensors the archive describes wrongly.
    throw SnapshotCorrupt(path + " does not load: " + error_summary(e));
  }
  if (!value.isGenericDict()) throw SnapshotCorrupt(path + " does not hold a dict");
  try {
    return from_dict(value.toGenericDict(), path);
  } catch (const SnapshotCorrupt&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const std::exception& e) {
    // c10::Error for a value of the wrong type, std::out_of_range from Dict::at for a missing field.
    throw SnapshotCorrupt(path + " has a missing or malformed entry: " + error_summary(e));
  }
}

SnapshotContent read_snapshot(const SnapshotFile& file) { return load_snapshot(file).content; }

std::vector<char> snapshot_bytes(const SnapshotContent& content) {
  std::vector<char> bytes;
  compat::write_pickle_archive(to_dict(content), [&](const void* data, std::size_t size) {
    const auto* begin = static_cast<const char*>(data);
    bytes.insert(bytes.end(), begin, begin + size);
  });
  return bytes;
}

SnapshotContent read_snapshot(const std::string& path) { return read_snapshot(SnapshotFile::open(path)); }

LoadedSnapshot load_snapshot(const SnapshotFile& file) {
  ByteView bytes = file_bytes(file);
  SnapshotContent content = read_snapshot(bytes, file.path());
  return LoadedSnapshot{file.path(), std::move(content), std::move(bytes)};
}

std::string model_fingerprint(const NamedTensors& model_state) {
  std::ostringstream text;
  for (const auto& [name, tensor] : model_state) text << (text.tellp() > 0 ? " " : "") << name << ':' << tensor.sizes();
  return text.str();
}

void write_model_file(const std::string& path, const NamedTensors& model_state) {
  AtomicFile file(path);  // mode 0600: the weights are the user's
  compat::write_pickle_archive(tensor_dict(model_state),
                               [&](const void* data, std::size_t size) { file.write(data, size); });
  file.commit();
}

SnapshotStore::SnapshotStore(const std::string& dir, int keep, const std::string& run_id, Warn warn)
    : files_(dir, run_id), keep_(static_cast<std::size_t>(std::max(keep, 1))), warn_(std::move(warn)) {
  for (SnapshotName& name : files_.this_runs()) kept_.push_back({std::move(name), false});
}

std::optional<LoadedSnapshot> SnapshotStore::resume() {
  for (auto it = kept_.begin(); it != kept_.end();) {
    try {
      LoadedSnapshot loaded = load_snapshot(files_.open(it->name));
      if (loaded.content.run_id != it->name.run_id) {
        throw SnapshotCorrupt(loaded.path + " holds run " + quote(loaded.content.run_id) +
                              ", not the run its name says");
      }
      it->verified = true;
      return loaded;
    } catch (const SnapshotCorrupt& e) {
      warn_(std::string("snapshot ") + e.what() + "; " + set_aside(it->name) + ", an older one is tried");
      it = kept_.erase(it);
    }
  }
  const std::vector<std::string> others = files_.other_runs();
  if (!others.empty()) {
    std::string list;
    for (const std::string& run : others) list += (list.empty() ? "" : ", ") + run;
    warn_("snapshot directory " + dir() + " holds snapshots of other runs (" + list + "); run " + files_.run_id() +
          " starts afresh and leaves them alone; pass --run-id to continue one of them");
  }
  return std::nullopt;
}

std::string SnapshotStore::set_aside(const SnapshotName& name) const {
  try {
    return "set aside as " + files_.set_aside(name);
  } catch (const std::exception& e) {
    return std::string("not set aside: ") + e.what();
  }
}

SnapshotStore::~SnapshotStore() {
  if (in_flight_.valid()) in_flight_.wait();
}

std::string SnapshotStore::write(const SnapshotContent& content) {
  const SnapshotName name{files_.run_id(), content.progress.epochs_run, content.progress.global_step};
  AtomicFile file = files_.create(name);
  compat::write_pickle_archive(to_dict(content), [&](const void* data, std::size_t size) { file.write(data, size); });
  file.commit();
  // Written again at the same step (a stop request right after a snapshot): one entry.
  kept_.erase(std::remove_if(kept_.begin(), kept_.end(),
                             [&](const Kept& k) {
                               return k.name.global_step == name.global_step && k.name.epochs_run == name.epochs_run;
                             }),
              kept_.end());
  kept_.insert(kept_.begin(), {name, true});
  prune();
  return file.path();
}

void SnapshotStore::prune() {
  std::stable_sort(kept_.begin(), kept_.end(), [](const Kept& a, const Kept& b) {
    return std::tie(a.name.global_step, a.name.epochs_run) > std::tie(b.name.global_step, b.name.epochs_run);
  });
  while (kept_.size() > keep_) {
    const Kept old = kept_.back();
    kept_.pop_back();
    if (old.verified) {
      files_.remove(old.name);
      continue;
    }
    // Left by an earlier process of this run and never read here: removed only once it is known to be ours.
    try {
      const SnapshotContent content = read_snapshot(files_.open(old.name));
      if (content.run_id != old.name.run_id) throw SnapshotCorrupt(files_.path_of(old.name) + " holds another run");
      files_.remove(old.name);
    } catch (const SnapshotCorrupt& e) {
      warn_(std::string("snapshot ") + e.what() + "; " + set_aside(old.name));
    } catch (const SnapshotUnreadable& e) {
      warn_(std::string(e.what()) + " (it was to be removed as the oldest)");
    }
  }
}

// Whichever of the writer thread and before_update() comes first copies the live state; the other finds it done.
struct SnapshotStore::StagingJob {
  std::mutex mutex;
  bool done = false;
  SnapshotContent live;
};

void SnapshotStore::stage_once(StagingJob& job) {
  std::lock_guard<std::mutex> lock(job.mutex);
  if (job.done) return;
  c10::NoGradGuard no_grad;
  stage(staging_, job.live);
  job.live = SnapshotContent();
  job.done = true;
}

void SnapshotStore::save_async(const SnapshotContent& live, Saved saved) {
  const auto start = Clock::now();
  wait();
  check_failures();
  auto job = std::make_shared<StagingJob>();
  job->live = live;
  pending_ = job;
  in_flight_ = std::async(std::launch::async, [this, job, saved = std::move(saved)] {
    stage_once(*job);
    std::string path;
    try {
      path = write(staging_);
    } catch (const std::exception& e) {
      const int failures = record_failure(error_summary(e));
      warn_("the snapshot of epoch " + std::to_string(staging_.progress.epochs_run) + ", step " +
            std::to_string(staging_.progress.global_step) + " could not be written: " + error_summary(e) +
            (failures < kMaxFailedSnapshots
                 ? "; training goes on and the next snapshot tries again (" + std::to_string(failures) + " of " +
                       std::to_string(kMaxFailedSnapshots) + " failures in a row)"
                 : "; that is " + std::to_string(failures) + " in a row: the run stops"));
      return;
    }
    record_failure("");
    saved(path);
  });
  blocked_ += Clock::now() - start;
  ++async_saves_;
}

int SnapshotStore::record_failure(const std::string& failure) {
  std::lock_guard<std::mutex> lock(failure_mutex_);
  last_failure_ = failure;
  failures_in_a_row_ = failure.empty() ? 0 : failures_in_a_row_ + 1;
  return failures_in_a_row_;
}

void SnapshotStore::check_failures() {
  std::lock_guard<std::mutex> lock(failure_mutex_);
  if (failures_in_a_row_ < kMaxFailedSnapshots) return;
  throw StorageFault(std::to_string(failures_in_a_row_) + " snapshots in a row could not be written to " + dir() +
                     " (last: " + last_failure_ +
                     "); stopping before more training is lost: fix the file "
                     "system or free space, then run the same command to resume from the last snapshot");
}

void SnapshotStore::before_update() {
  if (!pending_) return;
  const auto start = Clock::now();
  stage_once(*pending_);
  pending_.reset();
  blocked_ += Clock::now() - start;
}

void SnapshotStore::write_file(const std::string& name, const std::string& text) {
  AtomicFile file = files_.create_file(name);
  file.write(text.data(), text.size());
  file.commit();
}

std::string SnapshotStore::save(const SnapshotContent& live) {
  wait();
  return write(live);
}

void SnapshotStore::wait() {
  if (in_flight_.valid()) in_flight_.get();
  pending_.reset();
}

}  // namespace ddp::runtime
