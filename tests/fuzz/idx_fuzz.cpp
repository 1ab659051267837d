// libFuzzer target: IDX data files (--data, FashionMNIST). A file is read whole only when it holds what its header
// promises: nothing is allocated beyond the file's size.
#include <cstdint>
#include <cstdlib>

#include "core/error.hpp"
#include "ddp_runtime/data/idx.hpp"
#include "fuzz_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const ddp::runtime::IdxArray array = ddp::runtime::read_idx_file(ddp::fuzz::as_file(data, size));
    uint64_t count = 1;
    for (const int64_t dim : array.dims) count *= static_cast<uint64_t>(dim);
    if (array.bytes.size() != count || count > size) std::abort();
  } catch (const ddp::Error&) {
  }
  return 0;
}
