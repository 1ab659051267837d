// libFuzzer target: torch.save files as ddp-train reads them (pickle_reader.hpp): the snapshots it resumes from
// and the user's --data files. Whatever the bytes, the reader returns values or throws UnreadableArchive, and every
// tensor it returns lies inside the storage it owns: the first and last byte of each are read here, so
// AddressSanitizer sees a tensor that reaches outside the input or a record's copy. (LibTorch's zip reader is not
// instrumented; its allocations and the bytes it hands over are.)
//
// An input that starts like a zip file ("PK") is read as the whole file. Any other input is the pickle (data.pkl)
// of an archive this target writes around it, with storages data/0 to data/7 of 64 bytes each: the zip reader
// checks each record's CRC-32, so mutations of a whole file rarely get past it to the unpickler.
#include <caffe2/serialize/inline_container.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ddp_runtime/snapshots/pickle_reader.hpp"

namespace {

std::vector<char> archive_around(const uint8_t* pickle, size_t size) {
  std::vector<char> file;
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t n) {
    file.insert(file.end(), static_cast<const char*>(data), static_cast<const char*>(data) + n);
    return n;
  });
  writer.writeRecord("data.pkl", pickle, size);
  writer.writeRecord("byteorder", "little", 6);
  char storage[64];
  for (size_t i = 0; i < sizeof storage; ++i) storage[i] = static_cast<char>(i);
  for (int key = 0; key < 8; ++key) writer.writeRecord("data/" + std::to_string(key), storage, sizeof storage);
  writer.writeEndOfFile();
  return file;
}

void touch_tensor(const at::Tensor& tensor) {
  if (tensor.numel() == 0) return;
  int64_t last = 0;
  for (int64_t d = 0; d < tensor.dim(); ++d) last += (tensor.size(d) - 1) * tensor.stride(d);
  const auto item = static_cast<int64_t>(tensor.element_size());
  const int64_t end = (tensor.storage_offset() + last + 1) * item;
  if (end > static_cast<int64_t>(tensor.storage().nbytes())) std::abort();
  const volatile char* first = static_cast<const char*>(tensor.data_ptr());
  (void)first[0];
  (void)first[last * item + item - 1];
}

void touch(const c10::IValue& value) {
  if (value.isTensor()) {
    touch_tensor(value.toTensor());
  } else if (value.isList()) {
    for (const c10::IValue& item : value.toListRef()) touch(item);
  } else if (value.isTuple()) {
    for (const c10::IValue& item : value.toTupleRef().elements()) touch(item);
  } else if (value.isGenericDict()) {
    for (const auto& entry : value.toGenericDict()) {
      touch(entry.key());
      touch(entry.value());
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const bool whole_file = size >= 2 && std::memcmp(data, "PK", 2) == 0;
  std::vector<char> file = whole_file ? std::vector<char>(data, data + size) : archive_around(data, size);
  try {
    touch(ddp::runtime::read_torch_save(ddp::runtime::bytes_in_memory(std::move(file))));
  } catch (const ddp::runtime::UnreadableArchive&) {
  }
  return 0;
}
