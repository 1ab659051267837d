#include "ddp_runtime/snapshot.hpp"

#include <ATen/Functions.h>
#include <ATen/core/Dict.h>
#include <ATen/core/List.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <zlib.h>

#include <fstream>
#include <iterator>
#include <sstream>

#include "ddp_runtime/c10d_compat.hpp"
#include "ddp_runtime/error_message.hpp"
#include "ddp_runtime/snapshot_files.hpp"

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

std::vector<char> file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw SnapshotCorrupt("cannot open " + path);
  return std::vector<char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
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
}

}  // namespace

SnapshotContent read_snapshot(const std::string& path) {
  c10::IValue value;
  try {
    value = torch::jit::pickle_load(file_bytes(path));
  } catch (const c10::Error& e) {
    throw SnapshotCorrupt(path + " does not load: " + error_summary(e));
  }
  if (!value.isGenericDict()) throw SnapshotCorrupt(path + " does not hold a dict");
  try {
    return from_dict(value.toGenericDict(), path);
  } catch (const c10::Error& e) {
    throw SnapshotCorrupt(path + " has a malformed entry: " + error_summary(e));
  }
}

std::optional<LoadedSnapshot> newest_valid_snapshot(const std::string& dir, const Warn& warn) {
  for (const std::string& path : snapshot_paths_newest_first(dir)) {
    try {
      return LoadedSnapshot{path, read_snapshot(path)};
    } catch (const SnapshotCorrupt& e) {
      warn(std::string("skipping snapshot ") + e.what() + "; an older one is tried");
    }
  }
  return std::nullopt;
}

std::string model_fingerprint(const std::vector<std::pair<std::string, at::Tensor>>& model_state) {
  std::ostringstream text;
  for (const auto& [name, tensor] : model_state) text << (text.tellp() > 0 ? " " : "") << name << ':' << tensor.sizes();
  return text.str();
}

void write_model_file(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& model_state) {
  AtomicFile file(path);
  compat::write_pickle_archive(tensor_dict(model_state),
                               [&](const void* data, std::size_t size) { file.write(data, size); });
  file.commit();
}

SnapshotStore::SnapshotStore(std::string dir, int keep) : dir_(std::move(dir)), keep_(keep) {
  prepare_snapshot_dir(dir_);
}

SnapshotStore::~SnapshotStore() {
  if (in_flight_.valid()) in_flight_.wait();
}

std::string SnapshotStore::write(const SnapshotContent& content) const {
  const std::string path =
      join_path(dir_, snapshot_file_name({content.progress.epochs_run, content.progress.global_step}));
  AtomicFile file(path);
  compat::write_pickle_archive(to_dict(content), [&](const void* data, std::size_t size) { file.write(data, size); });
  file.commit();
  prune_snapshots(dir_, keep_);
  return path;
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
  auto job = std::make_shared<StagingJob>();
  job->live = live;
  pending_ = job;
  in_flight_ = std::async(std::launch::async, [this, job, saved = std::move(saved)] {
    stage_once(*job);
    saved(write(staging_));
  });
  blocked_ += Clock::now() - start;
  ++async_saves_;
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
