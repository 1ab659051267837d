#pragma once
// The bytes of a whole file, either memory-mapped read-only or held in memory. Data files are mapped: ranks on
// one node then share their pages through the page cache, and a data set larger than memory is paged in as it is
// read. Plain POSIX: no LibTorch here.
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace ddp::runtime {

struct ByteView {
  const char* data = nullptr;
  std::size_t size = 0;
  std::shared_ptr<const void> owner;  // keeps data valid: the mapping or the buffer
};

// Maps `path` read-only (MAP_PRIVATE: nothing is ever written back). Throws ddp::Error naming the file and the
// reason when it cannot be opened or is not a regular file. An empty file gives an empty view.
ByteView map_file(const std::string& path);

ByteView bytes_in_memory(std::vector<char> bytes);

}  // namespace ddp::runtime
