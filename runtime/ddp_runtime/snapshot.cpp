#include "ddp_runtime/snapshot.hpp"

#include <ATen/Functions.h>
#include <ATen/core/Dict.h>
#include <ATen/core/List.h>
#include <c10/core/GradMode.h>
#include <caffe2/serialize/inline_container.h>
#include <caffe2/serialize/read_adapter_interface.h>
#include <torch/csrc/jit/serialization/import_read.h>
#include <zlib.h>

#include <algorithm>
#include <sstream>
#include <tuple>

#include "ddp_runtime/c10d_compat.hpp"
#include "ddp_runtime/error_message.hpp"
#include "error.hpp"
#include "parse.hpp"

namespace ddp::runtime {
namespace {

constexpr char kFormat[] = "ddp-train snapshot 1";
using Clock = std::chrono::steady_clock;
using GenericDict = c10::impl::GenericDict;

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
  int64_t value() const { return static_cast<int64_t>(crc_); }

 private:
  uLong crc_ = crc32_z(0, nullptr, 0);
};

int64_t checksum(const SnapshotContent& c) {
  Checksum sum;
  sum.add(std::string(kFormat));
  for (const auto& [name, tensor] : c.model_state) {
    sum.add(name);
    sum.add(tensor);
  }
  for (const at::Tensor& buffer : c.momentum_buffers) sum.add(buffer);
  sum.add(c.lr);
  sum.add(c.momentum);
  sum.add(c.rng_state);
  const TrainingProgress& p = c.progress;
  for (const int64_t value :
       {p.epochs_run, p.batches_done, p.global_step, static_cast<int64_t>(p.seed), p.world_size, p.batch_size}) {
    sum.add(value);
  }
  sum.add(c.run_id);
  return sum.value();
}

GenericDict optimizer_dict(const SnapshotContent& c) {
  GenericDict state(c10::IntType::get(), c10::AnyType::get());
  c10::List<int64_t> params;
  for (std::size_t i = 0; i < c.momentum_buffers.size(); ++i) {
    params.push_back(static_cast<int64_t>(i));
    if (!c.momentum_buffers[i].defined()) continue;
    GenericDict param_state = string_dict();
    param_state.insert("momentum_buffer", c.momentum_buffers[i]);
    state.insert(static_cast<int64_t>(i), param_state);
  }
  // Every key of torch.optim.SGD's param_groups, so that Python's optimizer.load_state_dict accepts it.
  GenericDict group = string_dict();
  group.insert("lr", c.lr);
  group.insert("momentum", c.momentum);
  group.insert("dampening", 0.0);
  group.insert("weight_decay", 0.0);
  group.insert("nesterov", false);
  group.insert("maximize", false);
  group.insert("foreach", c10::IValue());
  group.insert("differentiable", false);
  group.insert("params", params);
  c10::impl::GenericList groups(c10::AnyType::get());
  groups.push_back(group);
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
  return sampler;
}

c10::Dict<std::string, at::Tensor> tensor_dict(const std::vector<std::pair<std::string, at::Tensor>>& entries) {
  c10::Dict<std::string, at::Tensor> dict;
  for (const auto& [name, tensor] : entries) dict.insert(name, tensor.detach());
  return dict;
}

GenericDict to_dict(const SnapshotContent& c) {
  GenericDict dict = string_dict();
  dict.insert("MODEL_STATE", tensor_dict(c.model_state));
  dict.insert("EPOCHS_RUN", c.progress.epochs_run);
  dict.insert("GLOBAL_STEP", c.progress.global_step);
  dict.insert("OPTIMIZER_STATE", optimizer_dict(c));
  dict.insert("RNG_STATE", c.rng_state);
  dict.insert("SAMPLER", sampler_dict(c.progress));
  dict.insert("FINGERPRINT", model_fingerprint(c.model_state));
  dict.insert("RUN_ID", c.run_id);
  dict.insert("FORMAT", std::string(kFormat));
  dict.insert("CHECKSUM", checksum(c));
  return dict;
}

c10::IValue entry(const GenericDict& dict, const std::string& key, const std::string& path) {
  const auto found = dict.find(key);
  if (found == dict.end()) throw SnapshotCorrupt(path + " has no " + key);
  return found->value();
}

std::vector<at::Tensor> momentum_buffers_from(const GenericDict& optimizer, const std::string& path) {
  const auto groups = entry(optimizer, "param_groups", path).toList();
  const auto params = groups.get(0).toGenericDict().at("params").toList();
  std::vector<at::Tensor> buffers(params.size());
  for (const auto& item : entry(optimizer, "state", path).toGenericDict()) {
    const auto index = static_cast<std::size_t>(item.key().toInt());
    if (index >= buffers.size())
      throw SnapshotCorrupt(path + ": optimizer state for parameter " + std::to_string(index));
    buffers[index] = item.value().toGenericDict().at("momentum_buffer").toTensor();
  }
  return buffers;
}

void read_ddp_train_fields(const GenericDict& dict, const std::string& path, SnapshotContent& c) {
  c.progress.global_step = entry(dict, "GLOBAL_STEP", path).toInt();
  const GenericDict optimizer = entry(dict, "OPTIMIZER_STATE", path).toGenericDict();
  c.momentum_buffers = momentum_buffers_from(optimizer, path);
  const auto group = optimizer.at("param_groups").toList().get(0).toGenericDict();
  c.lr = group.at("lr").toDouble();
  c.momentum = group.at("momentum").toDouble();
  c.rng_state = entry(dict, "RNG_STATE", path).toTensor();
  const GenericDict sampler = entry(dict, "SAMPLER", path).toGenericDict();
  c.progress.seed = static_cast<uint64_t>(sampler.at("seed").toInt());
  c.progress.batches_done = sampler.at("batches_done").toInt();
  c.progress.world_size = sampler.at("world_size").toInt();
  c.progress.batch_size = sampler.at("batch_size").toInt();
  c.run_id = entry(dict, "RUN_ID", path).toStringRef();
  if (entry(dict, "CHECKSUM", path).toInt() != checksum(c)) throw SnapshotCorrupt(path + " fails its checksum");
}

SnapshotContent from_dict(const GenericDict& dict, const std::string& path) {
  SnapshotContent c;
  for (const auto& item : entry(dict, "MODEL_STATE", path).toGenericDict()) {
    c.model_state.emplace_back(item.key().toStringRef(), item.value().toTensor());
  }
  c.progress.epochs_run = entry(dict, "EPOCHS_RUN", path).toInt();
  c.from_seed_script = !dict.contains("FORMAT");
  if (!c.from_seed_script) read_ddp_train_fields(dict, path, c);
  return c;
}

// LibTorch's archive reader straight on the file: each record is read once, into the tensor that keeps it.
class FileReader final : public caffe2::serialize::ReadAdapterInterface {
 public:
  explicit FileReader(const SnapshotFile& file) : file_(file) {}
  size_t size() const override { return static_cast<size_t>(file_.size()); }
  size_t read(uint64_t pos, void* buf, size_t n, const char*) const override { return file_.read_some(pos, buf, n); }

 private:
  const SnapshotFile& file_;
};

c10::IValue load_archive(const SnapshotFile& file) {
  caffe2::serialize::PyTorchStreamReader reader(std::make_shared<FileReader>(file));
  return torch::jit::readArchiveAndTensors("data", "", "", c10::nullopt, c10::nullopt, c10::nullopt, reader);
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

void stage(SnapshotContent& staged, const SnapshotContent& live) {
  staged.model_state.resize(live.model_state.size());
  for (std::size_t i = 0; i < live.model_state.size(); ++i) {
    staged.model_state[i].first = live.model_state[i].first;
    stage(staged.model_state[i].second, live.model_state[i].second);
  }
  staged.momentum_buffers.resize(live.momentum_buffers.size());
  for (std::size_t i = 0; i < live.momentum_buffers.size(); ++i)
    stage(staged.momentum_buffers[i], live.momentum_buffers[i]);
  stage(staged.rng_state, live.rng_state);
  staged.lr = live.lr;
  staged.momentum = live.momentum;
  staged.progress = live.progress;
  staged.run_id = live.run_id;
}

}  // namespace

SnapshotContent read_snapshot(const SnapshotFile& file) {
  const std::string& path = file.path();
  c10::IValue value;
  try {
    value = load_archive(file);
  } catch (const std::bad_alloc&) {
    throw;  // not the file's fault: it must not be set aside
  } catch (const std::exception& e) {
    // c10::Error mostly; LibTorch's unpickler also throws std::runtime_error (a dict keyed by a dict, found by
    // the corruption sweep in the runtime tests).
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

SnapshotContent read_snapshot(const std::string& path) { return read_snapshot(SnapshotFile::open(path)); }

std::string model_fingerprint(const std::vector<std::pair<std::string, at::Tensor>>& model_state) {
  std::ostringstream text;
  for (const auto& [name, tensor] : model_state) text << (text.tellp() > 0 ? " " : "") << name << ':' << tensor.sizes();
  return text.str();
}

void write_model_file(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& model_state) {
  AtomicFile file(path);  // mode 0600: the weights are the user's
  compat::write_pickle_archive(tensor_dict(model_state), [&](const void* data, std::size_t size) { file.write(data, size); });
  file.commit();
}

SnapshotStore::SnapshotStore(const std::string& dir, int keep, const std::string& run_id, Warn warn)
    : files_(dir, run_id), keep_(static_cast<std::size_t>(std::max(keep, 1))), warn_(std::move(warn)) {
  for (SnapshotName& name : files_.this_runs()) kept_.push_back({std::move(name), false});
}

std::optional<LoadedSnapshot> SnapshotStore::resume() {
  for (auto it = kept_.begin(); it != kept_.end();) {
    try {
      SnapshotContent content = read_snapshot(files_.open(it->name));
      if (content.run_id != it->name.run_id) {
        throw SnapshotCorrupt(files_.path_of(it->name) + " holds run " + quote(content.run_id) +
                              ", not the run its name says");
      }
      it->verified = true;
      return LoadedSnapshot{files_.path_of(it->name), std::move(content)};
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
                             [&](const Kept& k) { return k.name.global_step == name.global_step &&
                                                         k.name.epochs_run == name.epochs_run; }),
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
  throw std::runtime_error(std::to_string(failures_in_a_row_) + " snapshots in a row could not be written to " + dir() +
                           " (last: " + last_failure_ + "); stopping before more training is lost: fix the file "
                           "system or free space, then run the same command to resume from the last snapshot");
}

void SnapshotStore::before_update() {
  if (!pending_) return;
  const auto start = Clock::now();
  stage_once(*pending_);
  pending_.reset();
  blocked_ += Clock::now() - start;
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
