// ddp-train --model: TorchScript modules saved by Python, trained on data files, against Python DDP itself (Debian's
// python3-torch, Gloo, 2 ranks, the same initial weights, sampler order and optimizer), exact resume, Python
// continuing a run from a snapshot, ranks sharing a memory-mapped data set, and the refusals of bad input before the
// first step.
#include <gtest/gtest.h>

#include <ATen/core/Tensor.h>

#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <sstream>
#include <thread>

#include "test_common.hpp"
#include "test_support.hpp"

namespace ddp::runtime {
namespace {

using ddp::runtime::testing::with;
using ddp::testing::contains;

using testing::Result;

// Debian's torch 2.6 has no libuv for its TCPStore; the test network is the loopback.
const testing::Env kPythonEnv{{"USE_LIBUV", "0"}, {"GLOO_SOCKET_IFNAME", "lo"}};

// Runs tests/runtime/python/model_io.py; the test fails when it does.
void model_io(const std::vector<std::string>& args) {
  std::vector<std::string> argv{testing::torch_python(), testing::python_script("model_io.py")};
  argv.insert(argv.end(), args.begin(), args.end());
  const Result result = testing::run(argv);
  ASSERT_EQ(result.status, 0) << result.output;
}

std::vector<std::string> ddp_train_model(const std::string& dir, const std::string& model, const std::string& data,
                                         const std::vector<std::string>& args) {
  return with({testing::ddp_train(), "--model", model, "--data", data, "--snapshot-dir", dir + "/snapshots", "--output",
               dir + "/final.pt"},
              args);
}

void expect_all_succeed(const std::vector<Result>& results) {
  for (const Result& r : results) ASSERT_EQ(r.status, 0) << r.output;
}

// Same names, and every tensor equal (bitwise) or within float tolerance.
void expect_same_models(const std::string& a, const std::string& b, bool bitwise) {
  const auto first = testing::load_dict(a);
  const auto second = testing::load_dict(b);
  ASSERT_EQ(first.size(), second.size()) << a << " and " << b;
  for (const auto& item : first) {
    const std::string& name = item.key().toStringRef();
    ASSERT_TRUE(second.contains(name)) << name << " is missing from " << b;
    const at::Tensor x = item.value().toTensor();
    const at::Tensor y = second.at(name).toTensor();
    ASSERT_EQ(x.sizes(), y.sizes()) << name;
    if (bitwise || !x.is_floating_point()) {
      EXPECT_TRUE(x.equal(y)) << name << " differs between " << a << " and " << b;
    } else {
      EXPECT_TRUE(x.allclose(y, 1e-4, 1e-5)) << name << " differs between " << a << " and " << b
                                             << ": largest difference " << x.sub(y).abs().max().item().toDouble();
    }
  }
}

// A process's memory in kB, from /proc/PID/smaps: the mappings of one file summed.
struct MappedMemory {
  int64_t rss = 0;
  int64_t shared = 0;  // pages other processes map too (dirty while the page cache has not written them back yet)
  // Copied-on-write pages of the mapping: the one sign of a write. Private_Dirty is not: a page-cache page not yet
  // written back (always, on tmpfs) that only this process maps so far counts there too.
  int64_t anonymous = 0;
};

MappedMemory mapped_memory(pid_t pid, const std::string& file) {
  std::istringstream smaps(testing::read_text("/proc/" + std::to_string(pid) + "/smaps"));
  MappedMemory memory;
  bool in_file = false;
  const std::string suffix = " " + file;
  for (std::string line; std::getline(smaps, line);) {
    // A mapping's first line is "start-end perms offset dev inode path"; its fields follow as "Name:  value kB".
    const std::size_t colon = line.find(':');
    if (colon == std::string::npos || line.find(' ') < colon) {
      in_file = line.size() >= suffix.size() && line.compare(line.size() - suffix.size(), suffix.size(), suffix) == 0;
      continue;
    }
    const std::string name = line.substr(0, colon);
    int64_t* counter = name == "Rss"            ? &memory.rss
                       : name == "Shared_Clean" ? &memory.shared
                       : name == "Shared_Dirty" ? &memory.shared
                       : name == "Anonymous"    ? &memory.anonymous
                                                : nullptr;
    if (in_file && counter != nullptr) *counter += std::stoll(line.substr(colon + 1));
  }
  return memory;
}

// All anonymous memory of a process in kB (heap, stacks, copies), from /proc/PID/smaps_rollup.
int64_t anonymous_kb(pid_t pid) {
  std::istringstream rollup(testing::read_text("/proc/" + std::to_string(pid) + "/smaps_rollup"));
  for (std::string line; std::getline(rollup, line);) {
    if (line.rfind("Anonymous:", 0) == 0) return std::stoll(line.substr(line.find(':') + 1));
  }
  return -1;
}

bool has_ended(pid_t pid) {
  const std::string stat = testing::read_text("/proc/" + std::to_string(pid) + "/stat");
  const std::size_t close = stat.rfind(')');
  return close == std::string::npos || stat.compare(close + 1, 3, " Z ") == 0;
}

// Ends ranks still running when a test leaves, also on a failed assertion.
class KillAtEnd {
 public:
  explicit KillAtEnd(const std::vector<testing::Process>& ranks) : ranks_(ranks) {}
  ~KillAtEnd() {
    for (const auto& rank : ranks_) kill(-rank.pid, SIGKILL);
    for (const auto& rank : ranks_) testing::wait_for(rank);
  }
  KillAtEnd(const KillAtEnd&) = delete;
  KillAtEnd& operator=(const KillAtEnd&) = delete;

 private:
  const std::vector<testing::Process>& ranks_;
};

class DdpTrainModel : public ::testing::Test {
 protected:
  void SetUp() override {
    if (testing::torch_python().empty()) GTEST_SKIP() << "Debian's python3-torch is not installed";
    dir_ = testing::make_temp_dir();
  }

  // ddp-train and Python DDP, 2 ranks each, from the same module file on the same data with `args`.
  void expect_same_as_python(const std::string& model, const std::string& data, const std::vector<std::string>& args) {
    const std::string python_dir = dir_ + "/python";
    const std::string train_dir = dir_ + "/train";
    ASSERT_EQ(mkdir(python_dir.c_str(), 0755), 0);
    ASSERT_EQ(mkdir(train_dir.c_str(), 0755), 0);
    expect_all_succeed(testing::run_ranks(2,
                                          with({testing::torch_python(), testing::python_script("model_io.py"), "train",
                                                model, data, python_dir + "/final.pt"},
                                               args),
                                          python_dir, kPythonEnv));
    std::vector<std::string> train_args = args;
    // model_io.py's --epochs is ddp-train's first positional.
    const auto epochs = std::find(train_args.begin(), train_args.end(), "--epochs");
    const std::string total = *(epochs + 1);
    train_args.erase(epochs, epochs + 2);
    expect_all_succeed(
        testing::run_ranks(2, ddp_train_model(train_dir, model, data, with(train_args, {total, "0"})), train_dir));
    expect_same_models(train_dir + "/final.pt", python_dir + "/final.pt", false);
  }

  // ddp-train trains the cnn 4 epochs with `hyper` and a snapshot every epoch; Python's nn.Module and torch.optim
  // optimizer, loaded from the snapshot after epoch 2, train the last 2 epochs in Python DDP to ddp-train's final
  // parameters; the final TorchScript file runs like the final state dict.
  void expect_python_continues(const std::string& kind, const std::vector<std::string>& hyper) {
    const std::string model = dir_ + "/" + kind + ".pt";
    model_io({"make-model", kind, model});
    model_io({"make-data", kind, dir_ + "/data.pt", "--samples", "96"});
    expect_all_succeed(testing::run_ranks(
        2, ddp_train_model(dir_, model, dir_ + "/data.pt", with(hyper, {"--keep", "9", "4", "1"})), dir_));
    const std::string snapshot = dir_ + "/snapshots/snapshot-e000002-s000000000012-rdefault.pt";
    expect_all_succeed(
        testing::run_ranks(2,
                           with({testing::torch_python(), testing::python_script("model_io.py"), "continue", kind,
                                 snapshot, dir_ + "/data.pt", dir_ + "/python.pt", "--epochs", "4"},
                                hyper),
                           dir_, kPythonEnv));
    expect_same_models(dir_ + "/final.pt", dir_ + "/python.pt", false);
    const Result script = testing::run({testing::torch_python(), testing::python_script("model_io.py"), "run-script",
                                        kind, dir_ + "/final.script.pt", dir_ + "/final.pt"});
    EXPECT_EQ(script.output, "same outputs\n") << script.output;
  }

  // ddp-train on 2 ranks with `model`, `data` and `args`: every rank exits with status 2 and one line holding `part`,
  // before any epoch.
  void expect_refused(const std::string& model, const std::string& data, const std::vector<std::string>& args,
                      const std::string& part) {
    SCOPED_TRACE(model + " on " + data);
    const std::string run = testing::make_temp_dir();
    for (const Result& r : testing::run_ranks(2, ddp_train_model(run, model, data, with(args, {"2", "1"})), run)) {
      EXPECT_EQ(r.status, 2) << r.output;
      EXPECT_TRUE(contains(r.output, part)) << r.output;
      EXPECT_EQ(testing::own_lines(r.output), 1u) << r.output;
      EXPECT_FALSE(contains(r.output, "Epoch")) << r.output;
    }
  }

  std::string dir_;
};

// The tests' own support: a Python helper that hangs is killed showing where, so that a hang in CI can be found.
TEST(TestSupport, AHungPythonRunShowsItsThreadsAndItsTracebackBeforeItIsKilled) {
  if (testing::torch_python().empty()) GTEST_SKIP() << "Debian's python3-torch is not installed";
  const std::string dir = testing::make_temp_dir();
  const testing::Process python = testing::spawn(
      {testing::torch_python(), "-c", "import time\ndef waits_for_ever():\n    time.sleep(600)\nwaits_for_ever()"}, {},
      dir + "/output.log");
  EXPECT_EQ(testing::wait_at_most(python, std::chrono::seconds(3)), -1);
  const std::string output = testing::read_text(python.output_path);
  EXPECT_TRUE(contains(output, "the threads of " + std::to_string(python.pid) + " when it was found hung")) << output;
  EXPECT_TRUE(contains(output, "(python3) state S in ")) << output;
  EXPECT_TRUE(contains(output, "in waits_for_ever")) << output;
}

TEST_F(DdpTrainModel, EndsWithPythonDdpsParametersWithSgdMomentumWeightDecayAndAStepSchedule) {
  model_io({"make-model", "mlp", dir_ + "/mlp.pt"});
  model_io({"make-data", "mlp", dir_ + "/data.pt", "--samples", "200"});
  expect_same_as_python(
      dir_ + "/mlp.pt", dir_ + "/data.pt",
      {"--epochs", "3", "--batch-size", "16", "--seed", "3", "--lr", "0.05", "--momentum", "0.9", "--weight-decay",
       "0.001", "--lr-schedule", "step", "--lr-step-epochs", "2", "--lr-gamma", "0.5"});
}

TEST_F(DdpTrainModel, EndsWithPythonDdpsParametersWithAdamWClippingAndCosineWarmUpOnATracedModule) {
  model_io({"make-model", "mlp", dir_ + "/mlp.pt", "--trace"});
  model_io({"make-data", "mlp", dir_ + "/data", "--npy", "--samples", "200"});
  expect_same_as_python(dir_ + "/mlp.pt", dir_ + "/data",
                        {"--epochs", "3", "--batch-size", "16", "--optimizer", "adamw", "--lr", "0.01",
                         "--clip-grad-norm", "0.5", "--lr-schedule", "cosine", "--warmup-steps", "4"});
}

TEST_F(DdpTrainModel, ResumeIsExactAfterAKillWithBatchNormAndDropout) {
  model_io({"make-model", "cnn", dir_ + "/cnn.pt"});
  model_io({"make-data", "cnn", dir_ + "/data", "--npy", "--samples", "256"});
  const std::vector<std::string> args{"--batch-size", "8",      "--optimizer", "adamw", "--lr",
                                      "0.01",         "--seed", "9",           "8",     "1"};
  const std::string baseline = dir_ + "/baseline";
  const std::string killed = dir_ + "/killed";
  ASSERT_EQ(mkdir(baseline.c_str(), 0755), 0);
  ASSERT_EQ(mkdir(killed.c_str(), 0755), 0);
  expect_all_succeed(
      testing::run_ranks(2, ddp_train_model(baseline, dir_ + "/cnn.pt", dir_ + "/data", args), baseline));

  auto ranks = testing::spawn_ranks(2, ddp_train_model(killed, dir_ + "/cnn.pt", dir_ + "/data", args), killed);
  ASSERT_TRUE(testing::wait_for_text(ranks[0].output_path, "Epoch 2 | Training snapshot saved", ranks[0]));
  for (const auto& rank : ranks) kill(rank.pid, SIGKILL);
  for (const auto& rank : ranks) testing::wait_for(rank);
  const auto resumed = testing::run_ranks(2, ddp_train_model(killed, dir_ + "/cnn.pt", dir_ + "/data", args), killed);
  expect_all_succeed(resumed);
  EXPECT_TRUE(contains(resumed[0].output, "Resuming training from snapshot at Epoch ")) << resumed[0].output;
  EXPECT_FALSE(contains(resumed[0].output, "[CPU0] Epoch 0 |")) << resumed[0].output;
  expect_same_models(baseline + "/final.pt", killed + "/final.pt", true);
  EXPECT_TRUE(contains(resumed[0].output, "TorchScript model saved at " + killed + "/final.script.pt\n"))
      << resumed[0].output;
}

TEST_F(DdpTrainModel, EndsWithPythonDdpsParametersWhenAccumulatingGradientsUnderNoSync) {
  model_io({"make-model", "mlp", dir_ + "/mlp.pt"});
  model_io({"make-data", "mlp", dir_ + "/data.pt", "--samples", "200"});
  // 100 samples per rank in batches of 16: 7 batches an epoch, optimizer steps of 3, 3 and 1 batches.
  expect_same_as_python(dir_ + "/mlp.pt", dir_ + "/data.pt",
                        {"--epochs", "2", "--batch-size", "16", "--accumulate", "3", "--lr", "0.05", "--momentum",
                         "0.9", "--lr-schedule", "cosine", "--warmup-steps", "2"});
}

TEST_F(DdpTrainModel, EndsWithPythonDdpsParametersWithMseLossOnRegressionTargets) {
  model_io({"make-model", "mlp", dir_ + "/mlp.pt"});
  model_io({"make-data", "regression", dir_ + "/data.pt", "--samples", "200"});
  expect_same_as_python(dir_ + "/mlp.pt", dir_ + "/data.pt",
                        {"--epochs", "2", "--batch-size", "16", "--loss", "mse", "--lr", "0.05", "--momentum", "0.9"});
}

TEST_F(DdpTrainModel, EndsWithPythonDdpsParametersWithNllLossOnAModuleEndingInLogSoftmax) {
  model_io({"make-model", "mlp-log-softmax", dir_ + "/mlp.pt"});
  model_io({"make-data", "mlp", dir_ + "/data.pt", "--samples", "200"});
  expect_same_as_python(dir_ + "/mlp.pt", dir_ + "/data.pt",
                        {"--epochs", "2", "--batch-size", "16", "--loss", "nll", "--lr", "0.05", "--momentum", "0.9"});
}

// A researcher takes a ddp-train run back to Python: the original nn.Module and torch.optim optimizer load the
// snapshot's state and finish the run as ddp-train would have; the TorchScript file runs like the state dict.
TEST_F(DdpTrainModel, PythonContinuesTheRunFromASnapshotAndRunsTheFinalTorchScript) {
  expect_python_continues("cnn", {"--batch-size", "8", "--lr", "0.05", "--momentum", "0.9", "--seed", "4"});
}

// AdamW's state: torch.optim.AdamW.load_state_dict takes the snapshot's step counts and moments. On the MLP: in the
// CNN a convolution's bias feeds BatchNorm, which takes the batch mean away, so its gradient is rounding noise that
// AdamW scales to whole steps; PyTorch 2.x's AdamW rounds differently from LibTorch's (lerp against mul and add), and
// on Debian 13 the two continued runs ended 0.016 apart in conv.bias (and in the running mean after it).
TEST_F(DdpTrainModel, PythonContinuesAnAdamWRunFromASnapshot) {
  expect_python_continues(
      "mlp", {"--batch-size", "8", "--optimizer", "adamw", "--lr", "0.01", "--weight-decay", "0.05", "--seed", "4"});
}

// Two ranks train on one memory-mapped .npy data set: the pages they read are the page cache's, mapped by both
// (Shared_Clean and Shared_Dirty), never copied on write (the mapping's Anonymous pages), and neither rank holds a
// copy of the data in its anonymous memory.
TEST_F(DdpTrainModel, RanksShareTheMappedPagesOfAnNpyDataSet) {
  model_io({"make-model", "cnn", dir_ + "/cnn.pt"});
  // 2^20 samples of [1, 8, 8] float32: 256 MiB of inputs, more than a rank's anonymous memory, so a copy would show.
  model_io({"make-data", "cnn", dir_ + "/data", "--npy", "--samples", "1048576"});
  const std::string inputs = dir_ + "/data/x.npy";
  struct stat info;
  ASSERT_EQ(stat(inputs.c_str(), &info), 0);
  const int64_t file_kb = info.st_size / 1024;
  const auto ranks = testing::spawn_ranks(
      2, ddp_train_model(dir_, dir_ + "/cnn.pt", dir_ + "/data", {"--batch-size", "1024", "100", "0"}), dir_);
  const KillAtEnd kill_at_end(ranks);  // long before its 100 epochs end
  // Batches of 1024 random samples, 16 to a page, reach 90% of the pages within about 150 steps per rank; where the
  // page cache holds the file in 2 MiB folios mapped whole (ext4 on Linux 6.16 and later), within the first step.
  std::vector<MappedMemory> memory(ranks.size());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (bool all_read = false; !all_read;) {
    all_read = true;
    for (std::size_t r = 0; r < ranks.size(); ++r) {
      ASSERT_FALSE(has_ended(ranks[r].pid)) << testing::read_text(ranks[r].output_path);
      memory[r] = mapped_memory(ranks[r].pid, inputs);
      all_read = all_read && memory[r].rss >= file_kb * 9 / 10;
    }
    ASSERT_TRUE(std::chrono::steady_clock::now() < deadline)
        << "after 60 s the ranks have " << memory[0].rss << " and " << memory[1].rss << " kB of " << inputs
        << " mapped, of " << file_kb << " kB";
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  // Read again now that both have read: rank 0's reading above may come before rank 1's first step.
  for (std::size_t r = 0; r < ranks.size(); ++r) memory[r] = mapped_memory(ranks[r].pid, inputs);
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(memory[r].anonymous, 0);
    EXPECT_GE(memory[r].shared, file_kb * 8 / 10) << "of " << file_kb << " kB";
    const int64_t anonymous = anonymous_kb(ranks[r].pid);
    EXPECT_GT(anonymous, 0);
    EXPECT_LT(anonymous, file_kb / 2) << "kB of anonymous memory; the inputs are " << file_kb << " kB";
  }
}

TEST_F(DdpTrainModel, ShardsTrainLikeTheirConcatenation) {
  model_io({"make-model", "mlp", dir_ + "/mlp.pt"});
  model_io({"make-data", "mlp", dir_ + "/all.pt", "--samples", "120"});
  model_io({"split", dir_ + "/all.pt", "70", dir_ + "/head.pt", dir_ + "/tail"});
  const std::vector<std::string> args{"--lr", "0.1", "--batch-size", "8", "2", "0"};
  for (const std::string name : {"one", "shards"}) ASSERT_EQ(mkdir((dir_ + "/" + name).c_str(), 0755), 0);
  expect_all_succeed(
      testing::run_ranks(2, ddp_train_model(dir_ + "/one", dir_ + "/mlp.pt", dir_ + "/all.pt", args), dir_));
  expect_all_succeed(testing::run_ranks(
      2, ddp_train_model(dir_ + "/shards", dir_ + "/mlp.pt", dir_ + "/head.pt," + dir_ + "/tail", args), dir_));
  expect_same_models(dir_ + "/one/final.pt", dir_ + "/shards/final.pt", true);
}

// The refusals of bad input come in three tests, each within CTest's time limit on a loaded machine: every one starts
// 2 ranks of ddp-train, and every model_io.py call starts a Python with torch.
TEST_F(DdpTrainModel, RefusesABadModelOnEveryRankWithOneLineBeforeTheFirstStep) {
  model_io({"make-model", "two-inputs", dir_ + "/two.pt"});
  model_io({"make-model", "tuple-output", dir_ + "/tuple.pt"});
  model_io({"make-data", "mlp", dir_ + "/data.pt"});
  testing::write_bytes(dir_ + "/notes.txt", "not a model\n");
  const std::string d = dir_;
  expect_refused(d + "/notes.txt", d + "/data.pt", {}, d + "/notes.txt is not a TorchScript module");
  expect_refused(d + "/data.pt", d + "/data.pt", {}, "it looks like tensors saved by torch.save");
  expect_refused(d + "/missing.pt", d + "/data.pt", {}, "--model " + d + "/missing.pt: No such file or directory");
  expect_refused(d + "/two.pt", d + "/data.pt", {}, d + "/two.pt: its forward is forward(");
  expect_refused(d + "/tuple.pt", d + "/data.pt", {},
                 "calls forward with one tensor (a batch of inputs) and needs one tensor back");
}

TEST_F(DdpTrainModel, RefusesALossOrTargetsThatDoNotFitTheModelOnEveryRankBeforeTheFirstStep) {
  model_io({"make-model", "mlp", dir_ + "/mlp.pt"});
  model_io({"make-data", "mlp", dir_ + "/data.pt"});
  model_io({"make-data", "regression", dir_ + "/regression.pt"});
  model_io({"make-data", "mlp", dir_ + "/ten.pt", "--classes", "10", "--samples", "400"});
  const std::string d = dir_;
  expect_refused(d + "/mlp.pt", d + "/data.pt", {"--loss", "mse"},
                 "--loss mse needs floating-point targets shaped like the output (class indices take --loss "
                 "cross-entropy or nll)");
  expect_refused(d + "/mlp.pt", d + "/regression.pt", {"--loss", "nll"},
                 "--loss nll needs outputs [batch, classes, ...]");
  expect_refused(d + "/mlp.pt", d + "/ten.pt", {},
                 d + "/ten.pt 'y' holds the class index 9, but the model outputs 4 classes");
}

TEST_F(DdpTrainModel, RefusesBadDataOnEveryRankWithOneLineBeforeTheFirstStep) {
  model_io({"make-model", "mlp", dir_ + "/mlp.pt"});
  model_io({"make-bad-data", dir_});
  const std::string d = dir_;
  expect_refused(d + "/mlp.pt", d + "/missing-key.pt", {}, d + "/missing-key.pt has no key 'x'");
  expect_refused(d + "/mlp.pt", d + "/rows.pt", {}, d + "/rows.pt 'x' has 20 samples but " + d + "/rows.pt 'y' has 19");
  expect_refused(d + "/mlp.pt", d + "/not-dict.pt", {},
                 d + "/not-dict.pt holds a GenericList, expected a dict with 'x' and 'y'");
  expect_refused(d + "/mlp.pt", d + "/truncated-pt.pt", {},
                 d + "/truncated-pt.pt cannot be read: it is not a torch.save file");
  expect_refused(d + "/mlp.pt", d + "/truncated-npy", {},
                 d + "/truncated-npy/x.npy is truncated: its header says shape [20, 8]");
  expect_refused(d + "/mlp.pt", d + "/big-endian-npy", {}, d + "/big-endian-npy/x.npy holds numpy dtype '>f4'");
  expect_refused(d + "/mlp.pt", d + "/float64-x.pt", {},
                 d + "/mlp.pt fails on the inputs 'x' of " + d + "/float64-x.pt (a batch of [20, 8] Double)");
  expect_refused(d + "/mlp.pt", d + "/short-x.pt", {},
                 d + "/mlp.pt fails on the inputs 'x' of " + d + "/short-x.pt (a batch of [20, 7] Float)");
}

TEST_F(DdpTrainModel, RefusesASnapshotOfAnotherModelOrOptimizerNamingTheDifference) {
  model_io({"make-model", "mlp", dir_ + "/mlp.pt"});
  model_io({"make-model", "mlp", dir_ + "/narrow.pt", "--width", "16"});
  model_io({"make-data", "mlp", dir_ + "/data.pt", "--samples", "64"});
  ASSERT_EQ(
      testing::run(ddp_train_model(dir_, dir_ + "/mlp.pt", dir_ + "/data.pt", {"--momentum", "0.5", "1", "1"})).status,
      0);
  const Result narrow = testing::run(ddp_train_model(dir_, dir_ + "/narrow.pt", dir_ + "/data.pt", {"2", "1"}));
  EXPECT_EQ(narrow.status, 2) << narrow.output;
  EXPECT_TRUE(contains(narrow.output,
                       "'fc1.weight' is [32, 8] in the snapshot but [16, 8] in the model; resume with the "
                       "model it was written with (this run trains " +
                           dir_ + "/narrow.pt)"))
      << narrow.output;
  const Result adamw =
      testing::run(ddp_train_model(dir_, dir_ + "/mlp.pt", dir_ + "/data.pt", {"--optimizer", "adamw", "2", "1"}));
  EXPECT_EQ(adamw.status, 2) << adamw.output;
  EXPECT_TRUE(contains(adamw.output, "holds the state of --optimizer sgd, this run has --optimizer adamw"))
      << adamw.output;
  EXPECT_FALSE(contains(adamw.output + narrow.output, "[CPU0] Epoch")) << adamw.output << narrow.output;
}

}  // namespace
}  // namespace ddp::runtime
