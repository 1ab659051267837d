// Snapshot files: round trip, the background writer, keep-K, checksums on resume, and the format Python's
// torch.load reads (and the seed script writes).
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Functions.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>

#include "ddp_runtime/mapped_file.hpp"
#include "ddp_runtime/pickle_reader.hpp"
#include "ddp_runtime/snapshot.hpp"
#include "ddp_runtime/snapshot_files.hpp"
#include "error.hpp"
#include "test_support.hpp"

namespace ddp::runtime {
namespace {

constexpr float kMarker = 1234.5f;  // a value easy to find among the file's bytes

SnapshotContent sample(int64_t global_step, float fill = kMarker) {
  SnapshotContent c;
  c.model_state = {{"weight", at::full({4, 5}, fill)}, {"bias", at::arange(4, at::kFloat)}};
  OptimizerState o;
  o.lr = 0.01;
  o.initial_lr = 0.02;
  o.momentum = 0.9;
  o.per_param = {{{"momentum_buffer", at::full({4, 5}, 0.25f)}}, {}};
  c.optimizer = o;
  c.rng_state = at::detail::getDefaultCPUGenerator().get_state();
  c.progress = {3, 7, global_step, 11, 2, 32};
  return c;
}

void expect_same(const SnapshotContent& a, const SnapshotContent& b) {
  ASSERT_EQ(a.model_state.size(), b.model_state.size());
  for (std::size_t i = 0; i < a.model_state.size(); ++i) {
    EXPECT_EQ(a.model_state[i].first, b.model_state[i].first);
    EXPECT_TRUE(at::equal(a.model_state[i].second, b.model_state[i].second));
  }
  ASSERT_TRUE(b.optimizer.has_value());
  const OptimizerState& x = *a.optimizer;
  const OptimizerState& y = *b.optimizer;
  EXPECT_EQ(x.kind, y.kind);
  for (const auto& [first, second] : {std::pair{x.lr, y.lr}, {x.initial_lr, y.initial_lr}, {x.momentum, y.momentum},
                                      {x.weight_decay, y.weight_decay}, {x.beta1, y.beta1}, {x.beta2, y.beta2},
                                      {x.eps, y.eps}}) {
    EXPECT_EQ(first, second);
  }
  ASSERT_EQ(x.per_param.size(), y.per_param.size());
  for (std::size_t i = 0; i < x.per_param.size(); ++i) {
    ASSERT_EQ(x.per_param[i].size(), y.per_param[i].size()) << "parameter " << i;
    for (std::size_t j = 0; j < x.per_param[i].size(); ++j) {
      EXPECT_EQ(x.per_param[i][j].first, y.per_param[i][j].first);
      EXPECT_TRUE(at::equal(x.per_param[i][j].second, y.per_param[i][j].second)) << x.per_param[i][j].first;
    }
  }
  EXPECT_TRUE(at::equal(a.rng_state, b.rng_state));
  EXPECT_EQ(a.progress.epochs_run, b.progress.epochs_run);
  EXPECT_EQ(a.progress.batches_done, b.progress.batches_done);
  EXPECT_EQ(a.progress.global_step, b.progress.global_step);
  EXPECT_EQ(a.progress.seed, b.progress.seed);
  EXPECT_EQ(a.progress.world_size, b.progress.world_size);
  EXPECT_EQ(a.progress.batch_size, b.progress.batch_size);
  EXPECT_FALSE(b.from_python);
}

void flip_marker(const std::string& path) {
  std::string bytes = testing::read_text(path);
  const std::string marker(reinterpret_cast<const char*>(&kMarker), sizeof kMarker);
  const std::size_t at = bytes.find(marker);
  ASSERT_NE(at, std::string::npos);
  bytes[at] ^= 0x01;
  testing::write_bytes(path, bytes);
}

TEST(Snapshot, RoundTripsEverythingItHolds) {
  SnapshotStore store(testing::make_temp_dir(), 3);
  const SnapshotContent saved = sample(320);
  const std::string path = store.save(saved);
  EXPECT_EQ(path, store.dir() + "/snapshot-e000003-s000000000320.pt");
  expect_same(saved, read_snapshot(path));
}

TEST(Snapshot, RoundTripsAdamWState) {
  SnapshotStore store(testing::make_temp_dir(), 3);
  SnapshotContent saved = sample(5);
  OptimizerState& o = *saved.optimizer;
  o.kind = OptimizerKind::AdamW;
  o.momentum = 0.0;  // SGD's, not written for AdamW
  o.weight_decay = 0.01;
  o.beta1 = 0.8;
  o.eps = 1e-6;
  o.per_param = {{{"step", at::scalar_tensor(5.0, at::kFloat)}, {"exp_avg", at::full({4, 5}, 0.5f)},
                  {"exp_avg_sq", at::full({4, 5}, 0.125f)}},
                 {}};
  expect_same(saved, read_snapshot(store.save(saved)));
}

TEST(Snapshot, WritesInTheBackgroundFromStagedCopiesAndKeepsTheLastK) {
  SnapshotStore store(testing::make_temp_dir(), 2);
  std::mutex mutex;
  std::vector<std::string> saved_paths;
  SnapshotContent live = sample(0);
  for (int64_t step = 1; step <= 4; ++step) {
    live.progress.global_step = step;
    live.model_state[0].second.fill_(static_cast<float>(step));
    store.save_async(live, [&](const std::string& path) {
      std::lock_guard<std::mutex> lock(mutex);
      saved_paths.push_back(path);
    });
    // Training goes on once the state is copied: the file must not see this change.
    store.before_update();
    live.model_state[0].second.fill_(-1.0f);
  }
  store.wait();
  EXPECT_EQ(store.async_saves(), 4);
  ASSERT_EQ(saved_paths.size(), 4u);
  EXPECT_EQ(saved_paths.back(), store.dir() + "/snapshot-e000003-s000000000004.pt");
  EXPECT_EQ(snapshot_paths_newest_first(store.dir()),
            (std::vector<std::string>{saved_paths[3], saved_paths[2]}));
  EXPECT_TRUE(at::equal(read_snapshot(saved_paths[3]).model_state[0].second, at::full({4, 5}, 4.0f)));
  EXPECT_TRUE(at::equal(read_snapshot(saved_paths[2]).model_state[0].second, at::full({4, 5}, 3.0f)));
}

TEST(Snapshot, NewestValidWinsAndCorruptOrTruncatedOnesAreSkippedWithAWarningNamingThem) {
  SnapshotStore store(testing::make_temp_dir(), 5);
  const std::string oldest = store.save(sample(10));
  const std::string truncated = store.save(sample(20));
  const std::string corrupt = store.save(sample(30));
  flip_marker(corrupt);
  const std::string bytes = testing::read_text(truncated);
  testing::write_bytes(truncated, bytes.substr(0, bytes.size() / 2));

  std::vector<std::string> warnings;
  const auto found = newest_valid_snapshot(store.dir(), [&](const std::string& w) { warnings.push_back(w); });
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->path, oldest);
  EXPECT_EQ(found->content.progress.global_step, 10);
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_NE(warnings[0].find(corrupt + " fails its checksum"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[1].find(truncated), std::string::npos) << warnings[1];
}

TEST(Snapshot, StoreRefusesADirectoryItCannotWrite) {
  const std::string dir = testing::make_temp_dir();
  testing::write_bytes(dir + "/plain-file", "x");
  try {
    SnapshotStore store(dir + "/plain-file/snapshots", 3);
    FAIL() << "an unwritable directory was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(dir + "/plain-file"), std::string::npos) << e.what();
  }
}

TEST(Snapshot, PythonTorchLoadReadsItAsAPlainDictWithTheSeedsKeys) {
  const std::string python = testing::torch_python();
  if (python.empty()) GTEST_SKIP() << "Debian's python3-torch is not installed";
  SnapshotStore store(testing::make_temp_dir(), 3);
  const std::string path = store.save(sample(320, 2.0f));
  const testing::Result result = testing::run({python, testing::python_script("snapshot_io.py"), "read", path});
  ASSERT_EQ(result.status, 0) << result.output;
  EXPECT_NE(result.output.find("type dict\n"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("keys CHECKSUM EPOCHS_RUN FINGERPRINT FORMAT GLOBAL_STEP MODEL_STATE OPTIMIZER_STATE "
                               "RNG_STATE SAMPLER\n"),
            std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find("EPOCHS_RUN 3\nGLOBAL_STEP 320\nweight_sum 40.0\nsampler 7 2\nmomentum_sum 5.0\n"),
            std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find("loaded into Linear, SGD and the RNG"), std::string::npos) << result.output;
}

TEST(Snapshot, ReadsTheDictTheSeedScriptSaves) {
  const std::string python = testing::torch_python();
  if (python.empty()) GTEST_SKIP() << "Debian's python3-torch is not installed";
  const std::string path = testing::make_temp_dir() + "/snapshot.pt";
  const testing::Result result = testing::run({python, testing::python_script("snapshot_io.py"), "write-seed", path, "4"});
  ASSERT_EQ(result.status, 0) << result.output;
  const SnapshotContent content = read_snapshot(path);
  EXPECT_TRUE(content.from_python);
  EXPECT_FALSE(content.optimizer.has_value());
  EXPECT_EQ(content.progress.epochs_run, 4);
  ASSERT_EQ(content.model_state.size(), 2u);
  EXPECT_EQ(model_fingerprint(content.model_state), "weight:[1, 20] bias:[1]");
}

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
  ASSERT_EQ(testing::run({python, "-c", "import torch, sys; torch.save({'a': 1}, sys.argv[1], _use_new_zipfile_serialization=False)",
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
  SnapshotStore store(testing::make_temp_dir(), 3);
  const std::string bytes = testing::read_text(store.save(sample(7)));
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
