#include "ddp_runtime/idx.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>

#include "error.hpp"

namespace ddp::runtime {
namespace {

constexpr uint8_t kUnsignedByte = 0x08;

uint32_t read_big_endian(std::istream& in) {
  unsigned char b[4] = {};
  in.read(reinterpret_cast<char*>(b), 4);
  return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | uint32_t{b[3]};
}

}  // namespace

IdxArray read_idx_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw Error("cannot open " + path + ": " + std::strerror(errno) + "; --data must hold the uncompressed IDX files");
  const uint32_t magic = read_big_endian(in);
  const uint32_t type = (magic >> 8) & 0xff;
  const uint32_t rank = magic & 0xff;
  if (!in || (magic >> 16) != 0 || rank == 0 || rank > 4) {
    throw Error(path + " is not an IDX file (magic number " + std::to_string(magic) + "); gunzip it if it ends in .gz");
  }
  if (type != kUnsignedByte) {
    throw Error(path + " holds IDX element type " + std::to_string(type) + "; only unsigned bytes (8) are read");
  }
  IdxArray array;
  int64_t count = 1;
  for (uint32_t d = 0; d < rank; ++d) {
    array.dims.push_back(read_big_endian(in));
    count *= array.dims.back();
  }
  if (!in) throw Error(path + " is truncated inside its header");
  array.bytes.resize(static_cast<std::size_t>(count));
  in.read(reinterpret_cast<char*>(array.bytes.data()), count);
  if (in.gcount() != count) {
    throw Error(path + " is truncated: its header promises " + std::to_string(count) + " bytes of data, it has " +
                std::to_string(in.gcount()));
  }
  return array;
}

}  // namespace ddp::runtime
