#include "ddp_runtime/data/idx.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "base/unique_fd.hpp"
#include "core/error.hpp"

namespace ddp::runtime {
namespace {

constexpr uint8_t kUnsignedByte = 0x08;

uint32_t big_endian(const unsigned char* b) {
  return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | uint32_t{b[3]};
}

// Up to n bytes at offset; fewer only at the end of the file.
std::size_t read_at(int fd, uint64_t offset, void* buffer, std::size_t n) {
  std::size_t done = 0;
  while (done < n) {
    const ssize_t got = pread(fd, static_cast<char*>(buffer) + done, n - done, static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    done += static_cast<std::size_t>(got);
  }
  return done;
}

}  // namespace

IdxArray read_idx_file(const std::string& path) {
  const std::string fix = "; --data must hold the uncompressed IDX files";
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (!fd) throw Error("cannot open " + path + ": " + std::strerror(errno) + fix);
  struct stat info = {};
  if (fstat(fd.get(), &info) != 0 || !S_ISREG(info.st_mode)) throw Error(path + " is not a regular file" + fix);
  const auto file_size = static_cast<uint64_t>(info.st_size);
  unsigned char header[4 + 4 * 4] = {};
  const std::size_t header_read = read_at(fd.get(), 0, header, sizeof header);
  const uint32_t magic = header_read >= 4 ? big_endian(header) : 0;
  const uint32_t type = (magic >> 8) & 0xff;
  const uint32_t rank = magic & 0xff;
  if (header_read < 4 || (magic >> 16) != 0 || rank == 0 || rank > 4) {
    throw Error(path + " is not an IDX file (magic number " + std::to_string(magic) + "); gunzip it if it ends in .gz");
  }
  if (type != kUnsignedByte) {
    throw Error(path + " holds IDX element type " + std::to_string(type) + "; only unsigned bytes (8) are read");
  }
  const uint64_t data_offset = 4 + 4 * uint64_t{rank};
  if (header_read < data_offset) throw Error(path + " is truncated inside its header");
  IdxArray array;
  // The header is only a claim: the count is checked against the file's size before anything is allocated.
  long double claimed = 1;  // for the message only: the product may not fit 64 bits
  for (uint32_t d = 0; d < rank; ++d) {
    array.dims.push_back(big_endian(header + 4 + 4 * d));
    claimed *= static_cast<long double>(array.dims.back());
  }
  if (claimed > static_cast<long double>(file_size - data_offset)) {
    char text[64];
    std::snprintf(text, sizeof text, "%.0Lf", claimed);
    throw Error(path + " is truncated: its header promises " + text + " bytes of data, it has " +
                std::to_string(file_size - data_offset));
  }
  uint64_t count = 1;
  for (const int64_t dim : array.dims) count *= static_cast<uint64_t>(dim);
  array.bytes.resize(static_cast<std::size_t>(count));
  const std::size_t got = read_at(fd.get(), data_offset, array.bytes.data(), array.bytes.size());
  if (got != count) {
    throw Error(path + " is truncated: its header promises " + std::to_string(count) + " bytes of data, it has " +
                std::to_string(got));
  }
  return array;
}

}  // namespace ddp::runtime
