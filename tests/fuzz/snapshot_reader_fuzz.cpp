// libFuzzer target: the snapshot reader's check of a file before LibTorch reads it: the zip directory at the end
// of a snapshot, against the file's size, read through SnapshotFile as ddp-train reads a snapshot. Every record it
// accepts lies inside the file, so nothing allocated for it can exceed the file. (What the reader does with the
// records after this check is torch_save_fuzz's.)
#include <cstdint>
#include <cstdlib>

#include "ddp_runtime/snapshots/snapshot_files.hpp"
#include "fuzz_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const ddp::runtime::SnapshotFile file = ddp::runtime::SnapshotFile::open(ddp::fuzz::as_file(data, size));
    if (file.size() != size) std::abort();
    const auto records = ddp::runtime::read_zip_directory(file.size(), [&](uint64_t offset, void* buffer, size_t n) {
      if (file.read_some(offset, buffer, n) != n) throw ddp::runtime::SnapshotCorrupt("short");
    });
    uint64_t total = 0;
    for (const auto& record : records) {
      if (record.offset > size || record.size > size - record.offset) std::abort();
      total += record.size;
    }
    if (total > size) std::abort();
  } catch (const ddp::runtime::SnapshotCorrupt&) {
  }
  return 0;
}
