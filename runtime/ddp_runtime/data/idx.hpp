#pragma once
// IDX files, the format of the MNIST and FashionMNIST downloads (uncompressed): a magic number whose third
// byte is the element type and fourth the number of dimensions, big-endian 32-bit sizes, then the data.
#include <cstdint>
#include <string>
#include <vector>

namespace ddp::runtime {

struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> bytes;  // row-major, one byte per element
};

// Reads an IDX file of unsigned bytes (type 0x08), the type of every MNIST-family file. Throws ddp::Error naming
// the file and what is wrong with it.
IdxArray read_idx_file(const std::string& path);

}  // namespace ddp::runtime
