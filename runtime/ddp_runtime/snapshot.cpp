#include "ddp_runtime/snapshot.hpp"

#include <ATen/Functions.h>
#include <ATen/core/Dict.h>
#include <ATen/core/List.h>
#include <c10/core/GradMode.h>
#include <zlib.h>

#include <fstream>
#include <iterator>
#include <sstream>

#include "ddp_runtime/c10d_compat.hpp"
#include "ddp_runtime/error_message.hpp"
#include "ddp_runtime/pickle_reader.hpp"
#include "ddp_runtime/snapshot_files.hpp"

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
  void add(const void* data, std::size_t size) {
    crc_ = crc32_z(crc_, static_cast<const Bytef*>(data), size);
  }
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

int64_t checksum(const SnapshotContent& c) {
  Checksum sum;
  sum.add(std::string(kFormat));
  sum.add(c.model_state);
  const OptimizerState& o = *c.optimizer;
  sum.add(static_cast<int64_t>(o.kind));
  for (const double value : {o.lr, o.initial_lr, o.weight_decay}) sum.add(value);
  if (o.kind == OptimizerKind::Sgd) {
    sum.add(o.momentum);
  } else {
    for (const double value : {o.beta1, o.beta2, o.eps}) sum.add(value);
  }
  sum.add(static_cast<int64_t>(o.per_param.size()));
  for (const NamedTensors& state : o.per_param) sum.add(state);
  sum.add(c.rng_state);
  const TrainingProgress& p = c.progress;
  for (const int64_t value : {p.epochs_run, p.batches_done, p.global_step, static_cast<int64_t>(p.seed), p.world_size,
                              p.batch_size}) {
    sum.add(value);
  }
  return sum.value();
}

// Every key torch.optim's SGD and AdamW put in a param group, so that Python's optimizer.load_state_dict
// accepts the group whatever its version (1.13 ignores the keys it does not know).
GenericDict param_group(const OptimizerState& o) {
  GenericDict group = string_dict();
  group.insert("lr", o.lr);
  if (o.kind == OptimizerKind::Sgd) {
    group.insert("momentum", o.momentum);
    group.insert("dampening", 0.0);
    group.insert("weight_decay", o.weight_decay);
    group.insert("nesterov", false);
  } else {
    group.insert("betas", c10::ivalue::Tuple::create(o.beta1, o.beta2));
    group.insert("eps", o.eps);
    group.insert("weight_decay", o.weight_decay);
    group.insert("amsgrad", false);
  }
  group.insert("maximize", false);
  group.insert("foreach", c10::IValue());
  if (o.kind == OptimizerKind::AdamW) group.insert("capturable", false);
  group.insert("differentiable", false);
  group.insert("fused", c10::IValue());
  group.insert("initial_lr", o.initial_lr);
  GenericList params(c10::AnyType::get());
  for (std::size_t i = 0; i < o.per_param.size(); ++i) params.push_back(static_cast<int64_t>(i));
  group.insert("params", params);
  return group;
}

GenericDict tensor_dict(const NamedTensors& entries) {
  GenericDict dict = string_dict();
  for (const auto& [name, tensor] : entries) dict.insert(name, tensor.detach());
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
  dict.insert("FORMAT", std::string(kFormat));
  dict.insert("CHECKSUM", checksum(c));
  return dict;
}

c10::IValue entry(const GenericDict& dict, const std::string& key, const std::string& path) {
  const auto found = dict.find(key);
  if (found == dict.end()) throw SnapshotCorrupt(path + " has no " + key);
  return found->value();
}

double number(const c10::IValue& value, const std::string& what, const std::string& path) {
  if (value.isDouble()) return value.toDouble();
  if (value.isInt()) return static_cast<double>(value.toInt());
  throw SnapshotCorrupt(path + ": " + what + " is not a number");
}

// Ours, or one Python's optimizer.state_dict() wrote: the state of parameter params[p] is under key params[p].
OptimizerState optimizer_from(const GenericDict& optimizer, const std::string& path) {
  const auto groups = entry(optimizer, "param_groups", path).toList();
  if (groups.size() != 1) {
    throw SnapshotCorrupt(path + ": the optimizer has " + std::to_string(groups.size()) + " param groups; ddp-train uses one");
  }
  const GenericDict group = groups.get(0).toGenericDict();
  OptimizerState o;
  o.kind = group.contains("betas") ? OptimizerKind::AdamW : OptimizerKind::Sgd;
  o.lr = number(entry(group, "lr", path), "lr", path);
  o.initial_lr = group.contains("initial_lr") ? number(group.at("initial_lr"), "initial_lr", path) : o.lr;
  o.weight_decay = number(entry(group, "weight_decay", path), "weight_decay", path);
  if (o.kind == OptimizerKind::Sgd) {
    o.momentum = number(entry(group, "momentum", path), "momentum", path);
  } else {
    const c10::IValue betas = group.at("betas");
    const std::vector<c10::IValue> pair = betas.isTuple() ? betas.toTupleRef().elements().vec() : betas.toList().vec();
    if (pair.size() != 2) throw SnapshotCorrupt(path + ": betas is not a pair");
    o.beta1 = number(pair[0], "betas", path);
    o.beta2 = number(pair[1], "betas", path);
    o.eps = number(entry(group, "eps", path), "eps", path);
  }
  const auto params = entry(group, "params", path).toList();
  o.per_param.resize(params.size());
  for (const auto& item : entry(optimizer, "state", path).toGenericDict()) {
    std::size_t p = 0;
    while (p < params.size() && !(params.get(p).isInt() && item.key().isInt() && params.get(p).toInt() == item.key().toInt())) {
      ++p;
    }
    if (p == params.size()) throw SnapshotCorrupt(path + ": optimizer state for a parameter not in its param group");
    for (const auto& field : item.value().toGenericDict()) {
      const std::string& name = field.key().toStringRef();
      const c10::IValue& value = field.value();
      if (value.isTensor()) {
        o.per_param[p].emplace_back(name, value.toTensor());
      } else if (!value.isNone()) {  // PyTorch before 1.12 kept AdamW's step as a number
        o.per_param[p].emplace_back(name, at::scalar_tensor(number(value, name, path), at::kFloat));
      }
    }
  }
  return o;
}

void read_progress(const GenericDict& dict, const std::string& path, SnapshotContent& c) {
  c.progress.global_step = entry(dict, "GLOBAL_STEP", path).toInt();
  const GenericDict sampler = entry(dict, "SAMPLER", path).toGenericDict();
  c.progress.seed = static_cast<uint64_t>(sampler.at("seed").toInt());
  c.progress.batches_done = sampler.at("batches_done").toInt();
  c.progress.world_size = sampler.at("world_size").toInt();
  c.progress.batch_size = sampler.at("batch_size").toInt();
}

SnapshotContent from_dict(const GenericDict& dict, const std::string& path) {
  SnapshotContent c;
  for (const auto& item : entry(dict, "MODEL_STATE", path).toGenericDict()) {
    c.model_state.emplace_back(item.key().toStringRef(), item.value().toTensor());
  }
  c.progress.epochs_run = entry(dict, "EPOCHS_RUN", path).toInt();
  c.from_python = !dict.contains("FORMAT");
  if (c.from_python) {
    // A run that Python continued: what it saved of ours is used, the rest starts afresh.
    if (dict.contains("OPTIMIZER_STATE")) c.optimizer = optimizer_from(dict.at("OPTIMIZER_STATE").toGenericDict(), path);
    if (dict.contains("RNG_STATE")) c.rng_state = dict.at("RNG_STATE").toTensor();
    if (dict.contains("GLOBAL_STEP") && dict.contains("SAMPLER")) read_progress(dict, path, c);
    return c;
  }
  const std::string format = entry(dict, "FORMAT", path).toStringRef();
  if (format != kFormat) {
    throw SnapshotCorrupt(path + " is in the format '" + format + "' of another ddp-train version; this one reads '" +
                          kFormat + "'");
  }
  c.optimizer = optimizer_from(entry(dict, "OPTIMIZER_STATE", path).toGenericDict(), path);
  c.rng_state = entry(dict, "RNG_STATE", path).toTensor();
  read_progress(dict, path, c);
  if (entry(dict, "CHECKSUM", path).toInt() != checksum(c)) throw SnapshotCorrupt(path + " fails its checksum");
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
    std::vector<NamedTensors> slots = staged.optimizer ? std::move(staged.optimizer->per_param) : std::vector<NamedTensors>();
    staged.optimizer = *live.optimizer;
    slots.resize(live.optimizer->per_param.size());
    for (std::size_t i = 0; i < slots.size(); ++i) stage(slots[i], live.optimizer->per_param[i]);
    staged.optimizer->per_param = std::move(slots);
  }
  stage(staged.rng_state, live.rng_state);
  staged.progress = live.progress;
}

}  // namespace

SnapshotContent read_snapshot(const std::string& path) {
  c10::IValue value;
  try {
    value = read_torch_save(bytes_in_memory(file_bytes(path)));
  } catch (const UnreadableArchive& e) {
    throw SnapshotCorrupt(path + " does not load: " + e.what());
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

std::string model_fingerprint(const NamedTensors& model_state) {
  std::ostringstream text;
  for (const auto& [name, tensor] : model_state) text << (text.tellp() > 0 ? " " : "") << name << ':' << tensor.sizes();
  return text.str();
}

void write_model_file(const std::string& path, const NamedTensors& model_state) {
  AtomicFile file(path);
  compat::write_pickle_archive(tensor_dict(model_state), [&](const void* data, std::size_t size) { file.write(data, size); });
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
