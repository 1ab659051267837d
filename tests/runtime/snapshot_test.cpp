// Snapshots: round trip, the background writer, keep-K, checksums on resume, and the format Python's
// torch.load reads (and the seed script writes). Attacks and faults: a junk file and a second run in the directory
// never cost this run its snapshots, a snapshot missing a field falls back to the one before, reading keeps one copy in
// memory, and a write error is reported at once without ending the run.
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Functions.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <limits>
#include <mutex>

#include "core/error.hpp"
#include "ddp_runtime/common/mapped_file.hpp"
#include "ddp_runtime/snapshots/pickle_reader.hpp"
#include "ddp_runtime/snapshots/snapshot.hpp"
#include "ddp_runtime/snapshots/snapshot_files.hpp"
#include "test_common.hpp"
#include "test_support.hpp"

namespace ddp::runtime {
namespace {

using ddp::runtime::testing::listing;

using testing::ignore_warnings;
using testing::kSnapshotMarker;
using testing::sample_snapshot;

namespace fs = std::filesystem;

struct Warnings {
  std::mutex mutex;
  std::vector<std::string> lines;
  Warn sink() {
    return [this](const std::string& line) {
      std::lock_guard<std::mutex> lock(mutex);
      lines.push_back(line);
    };
  }
  std::string all() {
    std::lock_guard<std::mutex> lock(mutex);
    std::string text;
    for (const std::string& line : lines) text += line + "\n";
    return text;
  }
};

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
  for (const auto& [first, second] : {std::pair{x.lr, y.lr},
                                      {x.initial_lr, y.initial_lr},
                                      {x.momentum, y.momentum},
                                      {x.weight_decay, y.weight_decay},
                                      {x.beta1, y.beta1},
                                      {x.beta2, y.beta2},
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
  EXPECT_EQ(a.run_id, b.run_id);
  EXPECT_FALSE(b.from_python);
}

void flip_marker(const std::string& path) {
  std::string bytes = testing::read_text(path);
  const std::string marker(reinterpret_cast<const char*>(&kSnapshotMarker), sizeof kSnapshotMarker);
  const std::size_t at = bytes.find(marker);
  ASSERT_NE(at, std::string::npos);
  bytes[at] ^= 0x01;
  testing::write_bytes(path, bytes);
}

TEST(Snapshot, RoundTripsEverythingItHoldsInAPrivateFile) {
  SnapshotStore store(testing::make_temp_dir(), 3, "7", ignore_warnings());
  const SnapshotContent saved = sample_snapshot(320);
  const std::string path = store.save(saved);
  EXPECT_EQ(path, store.dir() + "/snapshot-e000003-s000000000320-r7.pt");
  expect_same(saved, read_snapshot(path));
  struct stat info = {};
  ASSERT_EQ(stat(path.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600u) << "snapshots hold the user's weights";
}

TEST(Snapshot, RoundTripsAdamWState) {
  SnapshotStore store(testing::make_temp_dir(), 3, "7", ignore_warnings());
  SnapshotContent saved = sample_snapshot(5);
  OptimizerState& o = *saved.optimizer;
  o.kind = OptimizerKind::AdamW;
  o.momentum = 0.0;  // SGD's, not written for AdamW
  o.weight_decay = 0.01;
  o.beta1 = 0.8;
  o.eps = 1e-6;
  o.per_param = {{{"step", at::scalar_tensor(5.0, at::kFloat)},
                  {"exp_avg", at::full({4, 5}, 0.5f)},
                  {"exp_avg_sq", at::full({4, 5}, 0.125f)}},
                 {}};
  expect_same(saved, read_snapshot(store.save(saved)));
}

TEST(Snapshot, WritesInTheBackgroundFromStagedCopiesAndKeepsTheLastK) {
  SnapshotStore store(testing::make_temp_dir(), 2, "7", ignore_warnings());
  std::mutex mutex;
  std::vector<std::string> saved_paths;
  SnapshotContent live = sample_snapshot(0);
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
  EXPECT_EQ(saved_paths.back(), store.dir() + "/snapshot-e000003-s000000000004-r7.pt");
  EXPECT_EQ(listing(store.dir()), (std::vector<std::string>{fs::path(saved_paths[2]).filename().string(),
                                                            fs::path(saved_paths[3]).filename().string()}));
  EXPECT_TRUE(at::equal(read_snapshot(saved_paths[3]).model_state[0].second, at::full({4, 5}, 4.0f)));
  EXPECT_EQ(read_snapshot(saved_paths[3]).run_id, "7");
  EXPECT_TRUE(at::equal(read_snapshot(saved_paths[2]).model_state[0].second, at::full({4, 5}, 3.0f)));
}

TEST(Snapshot, NewestValidWinsAndCorruptOrTruncatedOnesAreSetAsideWithAWarningNamingThem) {
  const std::string dir = testing::make_temp_dir();
  std::string oldest, truncated, corrupt;
  {
    SnapshotStore writer(dir, 5, "7", ignore_warnings());
    oldest = writer.save(sample_snapshot(10));
    truncated = writer.save(sample_snapshot(20));
    corrupt = writer.save(sample_snapshot(30));
  }
  flip_marker(corrupt);
  const std::string bytes = testing::read_text(truncated);
  testing::write_bytes(truncated, bytes.substr(0, bytes.size() / 2));

  Warnings warnings;
  SnapshotStore store(dir, 5, "7", warnings.sink());
  const auto found = store.resume();
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->path, oldest);
  EXPECT_EQ(found->content.progress.global_step, 10);
  ASSERT_EQ(warnings.lines.size(), 2u) << warnings.all();
  EXPECT_NE(warnings.lines[0].find(corrupt + " fails its checksum; set aside as " + corrupt + ".corrupt"),
            std::string::npos)
      << warnings.lines[0];
  EXPECT_NE(warnings.lines[1].find(truncated), std::string::npos) << warnings.lines[1];
  EXPECT_TRUE(fs::exists(corrupt + ".corrupt"));
  EXPECT_TRUE(fs::exists(truncated + ".corrupt"));
  // Set aside means never counted again: the next start does not even look at them.
  Warnings again;
  EXPECT_EQ(SnapshotStore(dir, 5, "7", again.sink()).resume()->path, oldest);
  EXPECT_EQ(again.all(), "");
}

// The junk-file attack: with --keep 1, one file with a higher step number made every new snapshot
// the "oldest" and deleted it as soon as it was written.
TEST(Snapshot, AJunkFileWithAHigherStepNeverCostsTheRunItsSnapshots) {
  const std::string dir = testing::make_temp_dir();
  const std::string junk_of_ours = dir + "/" + snapshot_file_name({"7", 999, 999999});
  const std::string junk_of_another = dir + "/" + snapshot_file_name({"8", 999, 999999});
  const std::string junk_unnamed = dir + "/snapshot-e000999-s000000999999.pt";
  for (const std::string& junk : {junk_of_ours, junk_of_another, junk_unnamed}) testing::write_bytes(junk, "junk");
  Warnings warnings;
  SnapshotStore store(dir, 1, "7", warnings.sink());
  EXPECT_FALSE(store.resume().has_value()) << "junk is never a snapshot to resume from";
  EXPECT_NE(warnings.all().find(junk_of_ours + " is not a whole snapshot"), std::string::npos) << warnings.all();
  // Junk planted while the run writes: never counted, never the reason to delete a new snapshot.
  std::string last;
  for (int64_t step : {100, 200, 300}) {
    last = store.save(sample_snapshot(step));
    testing::write_bytes(dir + "/" + snapshot_file_name({"7", 998, 999998}), "more junk");
  }
  std::vector<std::string> expected{fs::path(junk_unnamed).filename().string(), fs::path(last).filename().string(),
                                    snapshot_file_name({"7", 998, 999998}),
                                    fs::path(junk_of_ours).filename().string() + ".corrupt",
                                    fs::path(junk_of_another).filename().string()};
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(listing(dir), expected);
  EXPECT_EQ(read_snapshot(last).progress.global_step, 300);
}

// Two runs in one directory (the default is the working directory): each resumes from its own snapshots and
// prunes its own only, even when the other's have higher step numbers.
TEST(Snapshot, TwoRunsSharingADirectoryNeitherResumeFromNorPruneTheOthers) {
  const std::string dir = testing::make_temp_dir();
  SnapshotStore a(dir, 2, "a", ignore_warnings());
  SnapshotStore b(dir, 2, "b", ignore_warnings());
  for (int64_t step = 1; step <= 3; ++step) {
    a.save(sample_snapshot(step, 1.0f, "a"));
    b.save(sample_snapshot(step * 100, 2.0f, "b"));
  }
  EXPECT_EQ(listing(dir).size(), 4u);
  EXPECT_EQ(SnapshotFiles(dir, "a").this_runs().size(), 2u);
  EXPECT_EQ(SnapshotFiles(dir, "b").this_runs().size(), 2u);
  const auto resumed_a = SnapshotStore(dir, 2, "a", ignore_warnings()).resume();
  ASSERT_TRUE(resumed_a);
  EXPECT_EQ(resumed_a->content.progress.global_step, 3);
  EXPECT_EQ(resumed_a->content.run_id, "a");
  Warnings warnings;
  EXPECT_FALSE(SnapshotStore(dir, 2, "c", warnings.sink()).resume());
  EXPECT_NE(warnings.all().find("holds snapshots of other runs (a, b); run c starts afresh"), std::string::npos)
      << warnings.all();
  // A file renamed to the other run's name is refused: the run in it is not the one its name says.
  fs::rename(resumed_a->path, dir + "/" + snapshot_file_name({"b", 9, 900}));
  Warnings renamed;
  EXPECT_EQ(SnapshotStore(dir, 2, "b", renamed.sink()).resume()->content.progress.global_step, 300);
  EXPECT_NE(renamed.all().find("holds run 'a', not the run its name says"), std::string::npos) << renamed.all();
}

// Keep-K after a restart: snapshots an earlier process of the run left are removed only once read back whole;
// a corrupt one among them is set aside, not deleted.
TEST(Snapshot, OlderSnapshotsOfAnEarlierProcessAreReadBackBeforeTheyAreRemoved) {
  const std::string dir = testing::make_temp_dir();
  std::vector<std::string> earlier;
  {
    SnapshotStore first(dir, 3, "7", ignore_warnings());
    for (int64_t step = 1; step <= 3; ++step) earlier.push_back(first.save(sample_snapshot(step)));
  }
  flip_marker(earlier[0]);
  Warnings warnings;
  SnapshotStore second(dir, 1, "7", warnings.sink());
  ASSERT_EQ(second.resume()->path, earlier[2]);
  const std::string newest = second.save(sample_snapshot(4));
  EXPECT_EQ(listing(dir), (std::vector<std::string>{fs::path(earlier[0]).filename().string() + ".corrupt",
                                                    fs::path(newest).filename().string()}));
  EXPECT_NE(warnings.all().find(earlier[0] + " fails its checksum; set aside"), std::string::npos) << warnings.all();
}

// A snapshot that loads but lacks a field threw std::out_of_range from c10::Dict::at, which no
// one caught, and every restart stopped instead of using the snapshot before it.
TEST(Snapshot, ASnapshotMissingAFieldIsCorruptAndResumeUsesThePreviousOne) {
  const std::string dir = testing::make_temp_dir();
  std::string previous, newest;
  {
    SnapshotStore writer(dir, 3, "7", ignore_warnings());
    previous = writer.save(sample_snapshot(10));
    newest = writer.save(sample_snapshot(20));
  }
  const std::string bytes = testing::read_text(newest);
  const c10::IValue loaded = torch::jit::pickle_load(std::vector<char>(bytes.begin(), bytes.end()));
  // Every field of every nested dict, one at a time: the reader says "corrupt" or loads, never anything else.
  const auto dict = loaded.toGenericDict();
  int nested_fields = 0;
  for (const auto& item : dict) {
    if (!item.value().isGenericDict()) continue;
    for (const auto& field : item.value().toGenericDict()) {
      c10::impl::GenericDict copy = dict.copy();
      c10::impl::GenericDict inner = item.value().toGenericDict().copy();
      ASSERT_EQ(inner.erase(field.key()), 1u);
      copy.insert_or_assign(item.key(), inner);
      const std::string path = dir + "/probe.pt";
      std::vector<char> pickle = torch::jit::pickle_save(copy);
      testing::write_bytes(path, std::string(pickle.begin(), pickle.end()));
      try {
        read_snapshot(path);
      } catch (const SnapshotCorrupt&) {
      }
      ++nested_fields;
    }
  }
  EXPECT_GT(nested_fields, 3);
  fs::remove(dir + "/probe.pt");
  c10::impl::GenericDict broken = dict.copy();
  c10::impl::GenericDict sampler = dict.at("SAMPLER").toGenericDict().copy();
  ASSERT_EQ(sampler.erase("seed"), 1u);
  broken.insert_or_assign("SAMPLER", sampler);
  std::vector<char> pickle = torch::jit::pickle_save(broken);
  testing::write_bytes(newest, std::string(pickle.begin(), pickle.end()));
  EXPECT_THROW(read_snapshot(newest), SnapshotCorrupt);
  Warnings warnings;
  const auto found = SnapshotStore(dir, 3, "7", warnings.sink()).resume();
  ASSERT_TRUE(found);
  EXPECT_EQ(found->path, previous);
  EXPECT_NE(warnings.all().find(newest + " has a missing or malformed entry"), std::string::npos) << warnings.all();
}

// The snapshot `bytes` with its optimizer's one param group changed by `edit`, written to `path` and read back.
SnapshotContent read_with_param_group(const std::string& bytes, const std::string& path,
                                      const std::function<void(c10::impl::GenericDict&)>& edit) {
  const auto dict = torch::jit::pickle_load(std::vector<char>(bytes.begin(), bytes.end())).toGenericDict().copy();
  auto optimizer = dict.at("OPTIMIZER_STATE").toGenericDict().copy();
  auto group = optimizer.at("param_groups").toList().get(0).toGenericDict().copy();
  edit(group);
  c10::impl::GenericList groups(c10::AnyType::get());
  groups.push_back(group);
  optimizer.insert_or_assign("param_groups", groups);
  dict.insert_or_assign("OPTIMIZER_STATE", optimizer);
  const std::vector<char> pickle = torch::jit::pickle_save(dict);
  testing::write_bytes(path, std::string(pickle.begin(), pickle.end()));
  return read_snapshot(path);
}

TEST(Snapshot, AParamGroupIsReadAsTheOptimizerWhoseOwnKeyItHoldsAndOneWithNoneIsCorruptNamingThem) {
  SnapshotStore store(testing::make_temp_dir(), 3, "7", ignore_warnings());
  for (const OptimizerKind kind : {OptimizerKind::Sgd, OptimizerKind::AdamW}) {
    SCOPED_TRACE(to_string(kind));
    SnapshotContent saved = sample_snapshot(5);
    saved.optimizer->kind = kind;
    saved.optimizer->per_param = {{}, {}};
    const std::string bytes = testing::read_text(store.save(saved));
    const std::string path = store.dir() + "/probe.pt";
    EXPECT_EQ(read_with_param_group(bytes, path, [](auto&) {}).optimizer->kind, kind);
    const auto without = [](const char* key) {
      return [key](c10::impl::GenericDict& group) { EXPECT_EQ(group.erase(key), 1u) << key; };
    };
    try {
      read_with_param_group(bytes, path, without(kind == OptimizerKind::Sgd ? "momentum" : "betas"));
      ADD_FAILURE() << "a param group without its optimizer's own key was read";
    } catch (const SnapshotCorrupt& e) {
      EXPECT_EQ(std::string(e.what()), path + ": the optimizer's param group has none of momentum or betas");
    }
    if (kind == OptimizerKind::AdamW) {
      EXPECT_THROW(read_with_param_group(bytes, path, without("eps")), SnapshotCorrupt);
      EXPECT_THROW(read_with_param_group(bytes, path, [](auto& group) { group.insert_or_assign("betas", 0.9); }),
                   SnapshotCorrupt);
    }
  }
}

TEST(Snapshot, StoreRefusesADirectoryItCannotWrite) {
  const std::string dir = testing::make_temp_dir();
  testing::write_bytes(dir + "/plain-file", "x");
  try {
    SnapshotStore store(dir + "/plain-file/snapshots", 3, "7", ignore_warnings());
    FAIL() << "an unwritable directory was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(dir + "/plain-file"), std::string::npos) << e.what();
  }
}

TEST(Snapshot, PythonTorchLoadReadsItAsAPlainDictWithTheSeedsKeys) {
  const std::string python = testing::torch_python();
  if (python.empty()) GTEST_SKIP() << "Debian's python3-torch is not installed";
  SnapshotStore store(testing::make_temp_dir(), 3, "7", ignore_warnings());
  const std::string path = store.save(sample_snapshot(320, 2.0f));
  const testing::Result result = testing::run({python, testing::python_script("snapshot_io.py"), "read", path});
  ASSERT_EQ(result.status, 0) << result.output;
  EXPECT_NE(result.output.find("type dict\n"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("keys CHECKSUM EPOCHS_RUN FINGERPRINT FORMAT GLOBAL_STEP MODEL_STATE OPTIMIZER_STATE "
                               "RNG_STATE RUN_ID SAMPLER\n"),
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
  const testing::Result result =
      testing::run({python, testing::python_script("snapshot_io.py"), "write-seed", path, "4"});
  ASSERT_EQ(result.status, 0) << result.output;
  const SnapshotContent content = read_snapshot(path);
  EXPECT_TRUE(content.from_python);
  EXPECT_FALSE(content.optimizer.has_value());
  EXPECT_EQ(content.progress.epochs_run, 4);
  ASSERT_EQ(content.model_state.size(), 2u);
  EXPECT_EQ(model_fingerprint(content.model_state), "weight:[1, 20] bias:[1]");
}

// What tests/fuzz/snapshot_reader_fuzz cannot reach (LibTorch is not instrumented there): the unpickler and the
// archive reader behind the zip check, on a real snapshot with bytes changed all over it and cut at many places.
// Each variant must load (a byte that changes nothing the checksum covers) or be refused as corrupt; anything else
// (a crash, another exception) fails the test.
TEST(Snapshot, CorruptedBytesAnywhereAreRefusedOrLoadNeverCrash) {
  const std::string dir = testing::make_temp_dir();
  const std::string path = SnapshotStore(dir, 1, "7", ignore_warnings()).save(sample_snapshot(3));
  const std::string bytes = testing::read_text(path);
  const std::string variant = dir + "/variant.pt";
  int refused = 0, loaded = 0;
  const auto check = [&](const std::string& content) {
    testing::write_bytes(variant, content);
    try {
      read_snapshot(variant);
      ++loaded;
    } catch (const SnapshotCorrupt&) {
      ++refused;
    }
  };
  // Every 13th byte (a stride prime to the 64-byte alignment of torch.save's records) with two patterns, and cuts.
  for (std::size_t at = 0; at < bytes.size(); at += 13) {
    for (const unsigned char flip : {0x01, 0xff}) {
      std::string changed = bytes;
      changed[at] = static_cast<char>(changed[at] ^ flip);
      check(changed);
    }
  }
  for (std::size_t length = 0; length < bytes.size(); length += 97) check(bytes.substr(0, length));
  std::cout << "corrupted variants of a " << bytes.size() << "-byte snapshot: " << refused << " refused, " << loaded
            << " loaded\n";
  EXPECT_GT(refused, 0);
}

long status_kib(const std::string& field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stol(line.substr(field.size() + 1));
  }
  return -1;
}

// Reading a snapshot held the file's bytes, then a growing copy of them, then the tensors: about
// three times the snapshot on every rank at once. Measured in a fresh process, so that nothing else moved its peak.
TEST(Snapshot, ReadingKeepsOneCopyOfTheSnapshotInMemory) {
  const std::string dir = testing::make_temp_dir();
  SnapshotContent big = sample_snapshot(1);
  big.model_state[0].second = at::rand({16 * 1024 * 1024});  // 64 MiB
  const std::string path = SnapshotStore(dir, 1, "7", ignore_warnings()).save(big);
  const double size = static_cast<double>(fs::file_size(path));
  const testing::Result result =
      testing::run({testing::self_path()}, {{"RUNTIME_TEST_WORKER", "snapshot-read-memory"}, {"SNAPSHOT_PATH", path}});
  ASSERT_EQ(result.status, 0) << result.output;
  const std::size_t at = result.output.find("peak_growth_bytes ");
  ASSERT_NE(at, std::string::npos) << result.output;
  const double growth = std::stod(result.output.substr(at + 18));
  std::cout << "reading a " << size / 1048576 << " MiB snapshot raised the peak by " << growth / size
            << " times its size\n";
  EXPECT_LT(growth, 1.25 * size) << result.output;
  EXPECT_GT(growth, 0.9 * size) << "the tensors themselves must be there: " << result.output;
}

// A full disk in the background writer showed only at the next snapshot, as an exit. Now it is
// reported by the writer at once, training goes on, the next snapshot tries again, and only three failures in a
// row stop the run. Runs in a mount namespace of its own with a 1 MiB tmpfs.
TEST(Snapshot, AFullDiskIsReportedAtOnceRetriedAndEndsTheRunOnlyAfterThreeFailuresInARow) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root for a mount namespace with a small tmpfs";
  const std::string dir = testing::make_temp_dir();
  const testing::Result result =
      testing::run({"/usr/bin/unshare", "--mount", "--propagation", "private", testing::self_path()},
                   {{"RUNTIME_TEST_WORKER", "snapshot-full-disk"}, {"SNAPSHOT_MOUNT", dir}});
  EXPECT_EQ(result.status, 0) << result.output;
  EXPECT_NE(result.output.find("full-disk worker: all checks passed"), std::string::npos) << result.output;
}

}  // namespace

namespace testing {

namespace {

int fail_worker(const std::string& what) {
  std::cerr << "worker check failed: " << what << std::endl;
  return 1;
}

int read_memory_worker() {
  const char* path = std::getenv("SNAPSHOT_PATH");
  if (path == nullptr) return fail_worker("SNAPSHOT_PATH is not set");
  const SnapshotFile file = SnapshotFile::open(path);  // open first: only the read itself is measured
  const long before = status_kib("VmRSS");
  const SnapshotContent content = read_snapshot(file);
  const long peak = status_kib("VmHWM");
  std::cout << "peak_growth_bytes " << (peak - before) * 1024 << " tensors " << content.model_state.size() << std::endl;
  return 0;
}

// Fills the file system until a write fails.
void fill(const std::string& path) {
  std::ofstream out(path, std::ios::binary);
  const std::string block(4096, 'f');
  while (out.write(block.data(), static_cast<std::streamsize>(block.size())) && out.flush()) {
  }
}

int full_disk_worker() {
  const char* mount_point = std::getenv("SNAPSHOT_MOUNT");
  if (mount_point == nullptr) return fail_worker("SNAPSHOT_MOUNT is not set");
  const std::string dir = mount_point;
  const std::string options = "size=1m,mode=0700";
  if (std::system(("mount -t tmpfs -o " + options + " ddp-full-disk-test " + dir).c_str()) != 0) {
    return fail_worker("cannot mount a tmpfs on " + dir);
  }
  Warnings warnings;
  SnapshotStore store(dir + "/snapshots", 1, "7", warnings.sink());
  SnapshotContent state = sample_snapshot(1);
  state.model_state[0].second = at::rand({50000});  // 200 KB: two fit, the filler leaves room for none
  int saved = 0;
  const auto save = [&](int64_t step) {
    state.progress.global_step = step;
    store.save_async(state, [&](const std::string&) { ++saved; });
    store.before_update();
    store.wait();
  };
  save(1);
  if (saved != 1 || !warnings.lines.empty()) return fail_worker("the first snapshot: " + warnings.all());
  fill(dir + "/filler");
  save(2);
  // Reported by the writer as it failed, not at the next snapshot.
  if (warnings.lines.size() != 1 || warnings.lines[0].find("No space left on device") == std::string::npos ||
      warnings.lines[0].find("training goes on and the next snapshot tries again (1 of 3 failures in a row)") ==
          std::string::npos) {
    return fail_worker("one warning naming the error at once: " + warnings.all());
  }
  save(3);
  fs::remove(dir + "/filler");
  save(4);
  if (saved != 2 || warnings.lines.size() != 2)
    return fail_worker("space freed, the next snapshot is written: " + warnings.all());
  if (!fs::exists(dir + "/snapshots/" + snapshot_file_name({"7", 3, 4}))) return fail_worker("snapshot of step 4");
  fill(dir + "/filler");
  save(5);
  save(6);
  save(7);
  if (warnings.lines.back().find("that is 3 in a row: the run stops") == std::string::npos) {
    return fail_worker("the third failure in a row says the run stops: " + warnings.all());
  }
  // What the training thread does after every step.
  const std::string refusal = ddp::testing::error_of([&] { store.check_failures(); });
  if (refusal.find("3 snapshots in a row could not be written to " + dir + "/snapshots") == std::string::npos ||
      refusal.find("No space left on device") == std::string::npos) {
    return fail_worker("the fourth snapshot after three failures stops the run: '" + refusal + "'");
  }
  if (!fs::exists(dir + "/snapshots/" + snapshot_file_name({"7", 3, 4})))
    return fail_worker("the last good snapshot is kept");
  std::cout << "full-disk worker: all checks passed\n" << warnings.all();
  return 0;
}

}  // namespace

int snapshot_worker(const std::string& name) {
  if (name == "snapshot-read-memory") return read_memory_worker();
  if (name == "snapshot-full-disk") return full_disk_worker();
  std::cerr << "unknown worker " << name << std::endl;
  return 2;
}

}  // namespace testing
}  // namespace ddp::runtime
