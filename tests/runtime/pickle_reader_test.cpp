// The reader of torch.save's pickles (pickle_reader.hpp): every value torch.save writes into a state dict or a
// data file, refusals of Python objects and legacy files, and no crash on a truncated or damaged file.
#include "ddp_runtime/snapshots/pickle_reader.hpp"

#include <gtest/gtest.h>

#include <ATen/Functions.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "ddp_runtime/common/mapped_file.hpp"
#include "ddp_runtime/snapshots/snapshot.hpp"
#include "test_common.hpp"
#include "test_support.hpp"

namespace ddp::runtime {
namespace {

c10::IValue read_bytes(const std::string& bytes) {
  return read_torch_save(bytes_in_memory(std::vector<char>(bytes.begin(), bytes.end())));
}

TEST(PickleReader, ReadsEveryValueTorchSaveWritesIntoAStateDictOrADataFile) {
  const std::string python = testing::torch_python();
  if (python.empty()) GTEST_SKIP() << "Debian's python3-torch is not installed";
  const std::string path = testing::make_temp_dir() + "/zoo.pt";
  ASSERT_EQ(testing::run({python, testing::python_script("snapshot_io.py"), "write-zoo", path}).status, 0);
  const auto zoo = read_torch_save(map_file(path)).toGenericDict();
  const auto ordered = zoo.at("ordered").toGenericDict();
  EXPECT_EQ(ordered.at("b").toInt(), 1);
  EXPECT_EQ(ordered.at("a").toInt(), 2);
  std::vector<int64_t> ints;
  const auto int_list = zoo.at("ints").toList();
  for (std::size_t i = 0; i < int_list.size(); ++i) ints.push_back(int_list.get(i).toInt());
  EXPECT_EQ(ints, (std::vector<int64_t>{0, 255, 65535, -1, 2147483647, -2147483648LL, 1LL << 40, -(1LL << 40),
                                        std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min()}));
  const auto floats = zoo.at("floats").toTupleRef().elements();
  EXPECT_EQ(floats[0].toDouble(), 1.5);
  EXPECT_TRUE(std::signbit(floats[1].toDouble()));
  EXPECT_EQ(floats[2].toDouble(), 1e300);
  const auto flags = zoo.at("flags").toList();
  EXPECT_TRUE(flags.get(0).toBool());
  EXPECT_FALSE(flags.get(1).toBool());
  EXPECT_TRUE(flags.get(2).isNone());
  EXPECT_EQ(zoo.at("text").toStringRef(), "h\xc3\xa9llo");
  const auto nested = zoo.at("nested").toGenericDict();
  EXPECT_EQ(nested.at(int64_t{7}).toStringRef(), "int key");
  EXPECT_EQ(nested.at("t").toTupleRef().elements()[1].toTupleRef().elements()[1].toList().get(0).toInt(), 3);

  const at::Tensor base = at::arange(12, at::kFloat);
  const at::Tensor transposed = zoo.at("transposed").toTensor();
  EXPECT_TRUE(at::equal(transposed, base.reshape({3, 4}).t()));
  EXPECT_EQ(transposed.strides(), (std::vector<int64_t>{1, 4}));
  const at::Tensor view_a = zoo.at("view_a").toTensor();
  const at::Tensor view_b = zoo.at("view_b").toTensor();
  EXPECT_TRUE(at::equal(view_a, base.slice(0, 2, 5)));
  EXPECT_TRUE(at::equal(view_b, base.slice(0, 4)));
  EXPECT_TRUE(view_a.storage().is_alias_of(view_b.storage())) << "one storage, as saved";
  EXPECT_TRUE(at::equal(zoo.at("half").toTensor(), at::tensor({1.0, -2.5}).to(at::kHalf)));
  EXPECT_TRUE(at::equal(zoo.at("bytes").toTensor(), at::tensor({1, 200}, at::kInt).to(at::kByte)));
  EXPECT_TRUE(at::equal(zoo.at("mask").toTensor(), at::tensor({1, 0}, at::kInt).to(at::kBool)));
  EXPECT_TRUE(at::equal(zoo.at("long").toTensor(), at::tensor({int64_t{-3}, int64_t{1} << 40})));
  EXPECT_EQ(zoo.at("empty").toTensor().sizes(), (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(zoo.at("scalar").toTensor().dim(), 0);
  EXPECT_EQ(zoo.at("scalar").toTensor().item<double>(), 4.25);
  EXPECT_TRUE(at::equal(zoo.at("parameter").toTensor(), at::ones({2})));
  EXPECT_EQ(zoo.at("state_dict").toGenericDict().at("weight").toTensor().sizes(), (std::vector<int64_t>{3, 2}));
}

TEST(PickleReader, RefusesPythonObjectsAndLegacyFilesNamingThem) {
  const std::string python = testing::torch_python();
  if (python.empty()) GTEST_SKIP() << "Debian's python3-torch is not installed";
  const std::string dir = testing::make_temp_dir();
  ASSERT_EQ(testing::run({python, testing::python_script("snapshot_io.py"), "write-set", dir + "/set.pt"}).status, 0);
  try {
    read_torch_save(map_file(dir + "/set.pt"));
    FAIL() << "a Python set was read";
  } catch (const UnreadableArchive& e) {
    EXPECT_NE(std::string(e.what()).find("set; only tensors, dicts, lists, tuples, numbers and strings are read"),
              std::string::npos)
        << e.what();
  }
  ASSERT_EQ(testing::run({python, "-c",
                          "import torch, sys; torch.save({'a': 1}, sys.argv[1], _use_new_zipfile_serialization=False)",
                          dir + "/legacy.pt"})
                .status,
            0);
  try {
    read_torch_save(map_file(dir + "/legacy.pt"));
    FAIL() << "a legacy file was read";
  } catch (const UnreadableArchive& e) {
    EXPECT_NE(std::string(e.what()).find("legacy format"), std::string::npos) << e.what();
  }
}

// Every truncation of a snapshot is refused, and every flipped byte ends in UnreadableArchive or in a value (the
// checksum is the snapshot's business): never a crash, never another exception.
TEST(PickleReader, NeverCrashesOnATruncatedOrDamagedFile) {
  SnapshotStore store(testing::make_temp_dir(), 3, "7", testing::ignore_warnings());
  const std::string bytes = testing::read_text(store.save(testing::sample_snapshot(7)));
  for (std::size_t size = 0; size < bytes.size(); size += size < 256 || bytes.size() - size < 256 ? 1 : 61) {
    EXPECT_THROW(read_bytes(bytes.substr(0, size)), UnreadableArchive) << "truncated to " << size << " bytes";
  }
  int refused = 0;
  for (std::size_t at = 0; at < bytes.size(); ++at) {
    std::string damaged = bytes;
    damaged[at] = static_cast<char>(damaged[at] ^ (at % 7 == 0 ? 0xff : 0x11));
    try {
      read_bytes(damaged);
    } catch (const UnreadableArchive&) {
      ++refused;
    }
  }
  EXPECT_GT(refused, 0);
}

}  // namespace
}  // namespace ddp::runtime
