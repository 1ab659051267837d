// IDX files (idx.hpp), the format of the MNIST and FashionMNIST downloads: read, and refused naming the file.
#include "ddp_runtime/data/idx.hpp"

#include <gtest/gtest.h>

#include <string>

#include "test_common.hpp"
#include "test_support.hpp"

namespace ddp::runtime {
namespace {

using ddp::testing::error_of;

TEST(Idx, ReadsUnsignedByteArraysAndRefusesOthers) {
  const std::string dir = testing::make_temp_dir();
  testing::write_bytes(dir + "/ok", std::string("\0\0\x08\x02\0\0\0\x02\0\0\0\x03"
                                                "abcdef",
                                                18));
  const IdxArray array = read_idx_file(dir + "/ok");
  EXPECT_EQ(array.dims, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(std::string(array.bytes.begin(), array.bytes.end()), "abcdef");
  testing::write_bytes(dir + "/short", std::string("\0\0\x08\x01\0\0\0\x09"
                                                   "abc",
                                                   11));
  EXPECT_NE(error_of([&] { read_idx_file(dir + "/short"); }).find("truncated"), std::string::npos);
  testing::write_bytes(dir + "/gz", "\x1f\x8b\x08\x00");
  EXPECT_NE(error_of([&] { read_idx_file(dir + "/gz"); }).find("gunzip"), std::string::npos);
  EXPECT_NE(error_of([&] { read_idx_file(dir + "/missing"); }).find("cannot open"), std::string::npos);
  // A 16-byte file whose header claims 1.1 GiB was allocated before it was read.
  testing::write_bytes(dir + "/liar", std::string("\0\0\x08\x03\0\0\xea\x60\0\0\0\x1c\0\0\0\x1c", 16));
  EXPECT_EQ(error_of([&] { read_idx_file(dir + "/liar"); }),
            dir + "/liar is truncated: its header promises 47040000 bytes of data, it has 0");
  testing::write_bytes(dir + "/huge", std::string("\0\0\x08\x04\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"
                                                  "\xff\xff\xff\xff",
                                                  20));
  EXPECT_NE(error_of([&] { read_idx_file(dir + "/huge"); }).find("huge is truncated: its header promises 3402823"),
            std::string::npos);
  EXPECT_NE(error_of([&] { read_idx_file("/dev/zero"); }).find("is not a regular file"), std::string::npos);
}

}  // namespace
}  // namespace ddp::runtime
