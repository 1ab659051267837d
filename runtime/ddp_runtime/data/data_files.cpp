#include "ddp_runtime/data/data_files.hpp"

#include <ATen/core/Dict.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <sstream>

#include "core/error.hpp"
#include "ddp_runtime/common/mapped_file.hpp"
#include "ddp_runtime/common/tensor_text.hpp"
#include "ddp_runtime/snapshots/pickle_reader.hpp"

namespace ddp::runtime {
namespace {

const char kDataSaveHint[] = "save it with torch.save({\"x\": inputs, \"y\": targets}, path)";

// One file's (or one directory's) samples; `where` names them in messages.
struct Shard {
  std::string x_where;
  std::string y_where;
  at::Tensor x;
  at::Tensor y;
};

bool is_directory(const std::string& path) {
  struct stat info;
  return stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

// --- .npy (numpy's format 1.0 to 3.0: magic, version, header length, a Python dict literal, then the data) ---

struct NpyHeader {
  std::string descr;
  bool fortran_order = false;
  std::vector<int64_t> shape;
};

std::string dict_entry(const std::string& header, const std::string& key, const std::string& path) {
  const std::size_t at = header.find("'" + key + "'");
  const std::size_t colon = at == std::string::npos ? at : header.find(':', at);
  if (colon == std::string::npos)
    throw Error(path + " is not a .npy file numpy.save wrote: its header has no '" + key + "'");
  return header.substr(colon + 1);
}

NpyHeader parse_npy_header(const std::string& header, const std::string& path) {
  NpyHeader parsed;
  const std::string descr = dict_entry(header, "descr", path);
  const std::size_t open = descr.find('\'');
  const std::size_t close = open == std::string::npos ? open : descr.find('\'', open + 1);
  if (close == std::string::npos) throw Error(path + " has a header whose 'descr' is not a string");
  parsed.descr = descr.substr(open + 1, close - open - 1);
  const std::string order = dict_entry(header, "fortran_order", path);
  parsed.fortran_order = order.substr(order.find_first_not_of(' '), 4) == "True";
  const std::string shape = dict_entry(header, "shape", path);
  const std::size_t begin = shape.find('(');
  const std::size_t end = shape.find(')');
  if (begin == std::string::npos || end == std::string::npos || end < begin) {
    throw Error(path + " has a header whose 'shape' is not a tuple");
  }
  std::istringstream dims(shape.substr(begin + 1, end - begin - 1));
  std::string dim;
  while (std::getline(dims, dim, ',')) {
    dim.erase(std::remove_if(dim.begin(), dim.end(), [](char c) { return c == ' ' || c == 'L'; }), dim.end());
    if (dim.empty()) continue;
    if (dim.find_first_not_of("0123456789") != std::string::npos || dim.size() > 18) {
      throw Error(path + " has a header whose 'shape' holds '" + dim + "'");
    }
    parsed.shape.push_back(std::stoll(dim));
  }
  return parsed;
}

at::ScalarType npy_type(const std::string& descr, const std::string& path) {
  static const std::vector<std::pair<std::string, at::ScalarType>> types = {
      {"f4", at::kFloat}, {"f8", at::kDouble}, {"f2", at::kHalf}, {"i8", at::kLong}, {"i4", at::kInt},
      {"i2", at::kShort}, {"i1", at::kChar},   {"u1", at::kByte}, {"b1", at::kBool}};
  const bool one_byte = descr.size() == 3 && descr[2] == '1';
  const bool little = !descr.empty() && (descr[0] == '<' || descr[0] == '=' || (descr[0] == '|' && one_byte));
  for (const auto& [code, type] : types) {
    if (little && descr.substr(1) == code) return type;
  }
  throw Error(path + " holds numpy dtype '" + descr +
              "'; expected little-endian float32, float64, float16, int64, "
              "int32, int16, int8, uint8 or bool (numpy: array.astype('<f4'))");
}

at::Tensor read_npy(const std::string& path) {
  const ByteView bytes = map_file(path);
  const auto byte_at = [&](std::size_t i) { return static_cast<std::size_t>(static_cast<uint8_t>(bytes.data[i])); };
  if (bytes.size < 10 || std::memcmp(bytes.data, "\x93NUMPY", 6) != 0) {
    throw Error(path + " is not a .npy file (no \\x93NUMPY magic); write it with numpy.save");
  }
  const std::size_t major = byte_at(6);
  const std::size_t length_bytes = major == 1 ? 2 : 4;
  if (major < 1 || major > 3 || bytes.size < 8 + length_bytes)
    throw Error(path + " is a .npy file of unknown version " + std::to_string(major));
  std::size_t header_length = 0;
  for (std::size_t i = 0; i < length_bytes; ++i) header_length |= byte_at(8 + i) << (8 * i);
  const std::size_t data_offset = 8 + length_bytes + header_length;
  if (data_offset > bytes.size) throw Error(path + " is truncated inside its header");
  const NpyHeader header = parse_npy_header(std::string(bytes.data + 8 + length_bytes, header_length), path);
  const at::ScalarType type = npy_type(header.descr, path);
  if (header.fortran_order) throw Error(path + " is in Fortran order; save numpy.ascontiguousarray(array) instead");
  if (header.shape.empty()) throw Error(path + " holds a single value; expected one row per sample");
  const auto item_size = static_cast<std::size_t>(c10::elementSize(type));
  unsigned __int128 needed = item_size;
  for (const int64_t dim : header.shape)
    needed = std::min<unsigned __int128>(needed * static_cast<std::size_t>(dim), ~uint64_t{0});
  if (needed > bytes.size - data_offset) {
    throw Error(path + " is truncated: its header says shape " + shape_text(header.shape) + " of " + header.descr +
                " (" + std::to_string(static_cast<uint64_t>(needed)) + " bytes of data), the file has " +
                std::to_string(bytes.size - data_offset));
  }
  if (needed == 0) return at::empty(header.shape, at::TensorOptions(type));
  auto* data = const_cast<char*>(bytes.data + data_offset);
  const auto keep_owner = [owner = bytes.owner](void*) {};
  at::Tensor mapped = at::from_blob(data, header.shape, keep_owner, at::TensorOptions(type));
  // numpy aligns the data to 64 bytes; a file that does not is read by copying.
  return reinterpret_cast<std::uintptr_t>(data) % item_size == 0 ? mapped : mapped.clone();
}

Shard npy_shard(const std::string& dir) {
  const std::string prefix = dir.back() == '/' ? dir : dir + "/";
  Shard shard{prefix + "x.npy", prefix + "y.npy", {}, {}};
  for (const std::string* path : {&shard.x_where, &shard.y_where}) {
    struct stat info;
    if (stat(path->c_str(), &info) != 0) {
      throw Error("--data " + dir + " is a directory without " + *path +
                  "; a directory shard holds x.npy (inputs) and y.npy "
                  "(targets) written by numpy.save");
    }
  }
  shard.x = read_npy(shard.x_where);
  shard.y = read_npy(shard.y_where);
  return shard;
}

// --- torch.save files ---

at::Tensor tensor_entry(const c10::impl::GenericDict& dict, const std::string& key, const std::string& path) {
  const auto found = dict.find(key);
  if (found == dict.end()) {
    throw Error(path + " has no key '" + key +
                "'; expected a dict with 'x' (inputs) and 'y' (targets): " + kDataSaveHint);
  }
  if (!found->value().isTensor()) {
    throw Error(path + ": '" + key + "' is a " + found->value().tagKind() + ", expected a tensor; " + kDataSaveHint);
  }
  return found->value().toTensor();
}

Shard torch_shard(const std::string& path) {
  c10::IValue content;
  try {
    content = read_torch_save(map_file(path));
  } catch (const UnreadableArchive& e) {
    throw Error(path + " cannot be read: " + e.what() + "; " + kDataSaveHint);
  }
  if (!content.isGenericDict()) {
    throw Error(path + " holds a " + content.tagKind() + ", expected a dict with 'x' and 'y'; " + kDataSaveHint);
  }
  const auto dict = content.toGenericDict();
  return {path + " 'x'", path + " 'y'", tensor_entry(dict, "x", path), tensor_entry(dict, "y", path)};
}

void check_shard(const Shard& shard) {
  if (shard.x.dim() == 0 || shard.y.dim() == 0) {
    throw Error((shard.x.dim() == 0 ? shard.x_where : shard.y_where) +
                " is a single value; expected one row per sample");
  }
  if (shard.x.size(0) != shard.y.size(0)) {
    throw Error(shard.x_where + " has " + std::to_string(shard.x.size(0)) + " samples but " + shard.y_where + " has " +
                std::to_string(shard.y.size(0)) + "; expected one target per input");
  }
  if (shard.x.size(0) == 0) throw Error(shard.x_where + " holds no samples");
  if (shard.x.is_complex() || shard.x.scalar_type() == at::kBool) {
    throw Error(shard.x_where + " is " + tensor_text(shard.x) + "; expected real numbers (float32 for most models)");
  }
  if (shard.y.is_complex() || shard.y.scalar_type() == at::kBool) {
    throw Error(shard.y_where + " is " + tensor_text(shard.y) +
                "; expected class indices (an integer type) or target values (floating point)");
  }
}

void check_like(const at::Tensor& tensor, const std::string& where, const at::Tensor& first,
                const std::string& first_where) {
  if (tensor.sizes().slice(1) != first.sizes().slice(1) || tensor.scalar_type() != first.scalar_type()) {
    throw Error(where + " holds samples of " + shape_text(tensor.sizes().slice(1)) + " " +
                c10::toString(tensor.scalar_type()) + ", expected " + shape_text(first.sizes().slice(1)) + " " +
                c10::toString(first.scalar_type()) + " like " + first_where);
  }
}

class FileDataset : public Dataset {
 public:
  FileDataset(std::vector<Shard> shards, std::string name) : shards_(std::move(shards)), name_(std::move(name)) {
    for (const Shard& shard : shards_) {
      starts_.push_back(size_);
      size_ += shard.x.size(0);
    }
  }

  int64_t size() const override { return size_; }
  std::string name() const override { return name_; }

  Batch get_batch(const at::Tensor& indices) const override {
    if (shards_.size() == 1) return {shards_[0].x.index_select(0, indices), shards_[0].y.index_select(0, indices)};
    // torch.utils.data.ConcatDataset: each shard gives its samples, which go to their places in the batch.
    const at::Tensor wanted = indices.contiguous();
    const int64_t* index = wanted.data_ptr<int64_t>();
    std::vector<std::vector<int64_t>> places(shards_.size());
    std::vector<std::vector<int64_t>> local(shards_.size());
    for (int64_t i = 0; i < wanted.numel(); ++i) {
      const auto s =
          static_cast<std::size_t>(std::upper_bound(starts_.begin(), starts_.end(), index[i]) - starts_.begin() - 1);
      places[s].push_back(i);
      local[s].push_back(index[i] - starts_[s]);
    }
    Batch batch{at::empty(batch_sizes(shards_[0].x, wanted.numel()), shards_[0].x.options()),
                at::empty(batch_sizes(shards_[0].y, wanted.numel()), shards_[0].y.options())};
    for (std::size_t s = 0; s < shards_.size(); ++s) {
      if (places[s].empty()) continue;
      const at::Tensor at_places = long_tensor(places[s]);
      const at::Tensor at_local = long_tensor(local[s]);
      batch.inputs.index_copy_(0, at_places, shards_[s].x.index_select(0, at_local));
      batch.targets.index_copy_(0, at_places, shards_[s].y.index_select(0, at_local));
    }
    return batch;
  }

  void check_class_labels(int64_t classes) const override {
    for (const Shard& shard : shards_) {
      if (shard.y.is_floating_point()) continue;
      const int64_t low = shard.y.min().item<int64_t>();
      const int64_t high = shard.y.max().item<int64_t>();
      if (low < 0 || high >= classes) {
        throw Error(shard.y_where + " holds the class index " + std::to_string(low < 0 ? low : high) +
                    ", but the model " + "outputs " + std::to_string(classes) + " classes; expected indices 0 to " +
                    std::to_string(classes - 1));
      }
    }
  }

 private:
  static at::Tensor long_tensor(std::vector<int64_t>& values) {
    return at::from_blob(values.data(), {static_cast<int64_t>(values.size())}, at::kLong).clone();
  }
  static std::vector<int64_t> batch_sizes(const at::Tensor& samples, int64_t batch) {
    std::vector<int64_t> sizes = samples.sizes().vec();
    sizes[0] = batch;
    return sizes;
  }

  std::vector<Shard> shards_;
  std::vector<int64_t> starts_;
  int64_t size_ = 0;
  std::string name_;
};

}  // namespace

std::unique_ptr<Dataset> open_data_files(const std::string& paths) {
  std::vector<Shard> shards;
  std::stringstream list(paths);
  std::string path;
  while (std::getline(list, path, ',')) {
    if (path.empty()) continue;
    shards.push_back(is_directory(path) ? npy_shard(path) : torch_shard(path));
    check_shard(shards.back());
    check_like(shards.back().x, shards.back().x_where, shards.front().x, shards.front().x_where);
    check_like(shards.back().y, shards.back().y_where, shards.front().y, shards.front().y_where);
  }
  if (shards.empty()) throw Error("--data '" + paths + "' names no file; e.g. --data train.pt");
  return std::make_unique<FileDataset>(std::move(shards), paths);
}

}  // namespace ddp::runtime
