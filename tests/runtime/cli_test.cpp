// ddp-train's command line (cli.hpp): what it reads, how it refuses bad input, and its usage.
#include <gtest/gtest.h>

#include <sstream>

#include "core/env.hpp"
#include "core/error.hpp"
#include "ddp_runtime/options/cli.hpp"
#include "test_common.hpp"
#include "test_support.hpp"

namespace ddp::runtime {
namespace {

using ddp::testing::error_of;

TEST(Cli, ParsesTheSeedsPositionalsAndOptions) {
  const TrainOptions o = parse_train_args({"--batch-size", "64", "--workload=mlp", "--width", "512", "--keep", "2",
                                           "--snapshot-every-seconds", "30", "--momentum", "0.9", "50", "10"},
                                          env_with({{"DDP_SNAPSHOT_DIR", "/shared/snaps"}}))
                             .options;
  EXPECT_EQ(o.total_epochs, 50);
  EXPECT_EQ(o.save_every, 10);
  EXPECT_EQ(o.batch_size, 64);
  EXPECT_EQ(o.workload, WorkloadKind::Mlp);
  EXPECT_EQ(o.width, 512);
  EXPECT_EQ(o.keep, 2);
  EXPECT_DOUBLE_EQ(o.snapshot_every_seconds, 30);
  EXPECT_DOUBLE_EQ(o.optimizer.momentum, 0.9);
  EXPECT_EQ(o.snapshot_dir, "/shared/snaps");
  EXPECT_EQ(o.output, "finalmodel.pt");
}

TEST(Cli, SnapshotDirOptionOverridesTheEnvironmentAndDefaultsToTheWorkingDirectory) {
  EXPECT_EQ(parse_train_args({"--snapshot-dir", "/mine", "5", "1"}, env_with({{"DDP_SNAPSHOT_DIR", "/plugin"}}))
                .options.snapshot_dir,
            "/mine");
  EXPECT_EQ(parse_train_args({"5", "1"}, env_with({})).options.snapshot_dir, ".");
}

TEST(Cli, RefusesBadInputNamingTheValueAndTheFix) {
  const auto bad = [](std::vector<std::string> args) {
    return error_of([&] { parse_train_args(args, env_with({})); });
  };
  EXPECT_EQ(bad({"--batch-size", "abc", "5", "1"}),
            "--batch-size 'abc' is not a whole number of at least 1; e.g. --batch-size 32");
  EXPECT_NE(bad({"--workload", "resnet", "5", "1"}).find("use seed, mlp or fashion-mnist"), std::string::npos);
  EXPECT_NE(bad({"--lr", "-1", "5", "1"}).find("--lr '-1'"), std::string::npos);
  EXPECT_NE(bad({"5"}).find("usage: ddp-train"), std::string::npos);
  EXPECT_NE(bad({"--frobnicate", "5", "1"}).find("unknown option '--frobnicate'"), std::string::npos);
  EXPECT_NE(bad({"--workload", "fashion-mnist", "5", "1"}).find("needs --data DIR"), std::string::npos);
  EXPECT_EQ(bad({"0", "1"}), "total_epochs '0' is not a whole number of at least 1; e.g. ddp-train 50 10");
  EXPECT_EQ(bad({"--json=yes", "5", "1"}), "--json takes no value; run ddp-train --help");
  EXPECT_EQ(bad({"5", "1", "--keep"}), "--keep needs a value; run ddp-train --help");
  EXPECT_EQ(bad({"--loss", "l1", "5", "1"}), "--loss 'l1' is not a loss; use mse, cross-entropy or nll");
  EXPECT_EQ(bad({"--betas", "0.9", "5", "1"}),
            "--betas '0.9' is not two numbers separated by a comma; e.g. --betas 0.9,0.999");
  EXPECT_EQ(bad({"--recover", "maybe", "5", "1"}), "--recover 'maybe' is not a recovery mode; use none or in-place");
  const auto with_bad_recover = [] { parse_train_args({"5", "1"}, env_with({{"DDP_RECOVER", "maybe"}})); };
  EXPECT_EQ(error_of(with_bad_recover), "DDP_RECOVER 'maybe' is not a recovery mode; use none or in-place");
}

TEST(Cli, HelpStopsParsingAndTheUsageShowsEachOptionWithItsDefault) {
  const auto unknown_then_help = [] { parse_train_args({"--frobnicate", "-h"}, env_with({})); };
  EXPECT_EQ(error_of(unknown_then_help), "unknown option '--frobnicate'; run ddp-train --help");
  EXPECT_TRUE(parse_train_args({"-h", "--frobnicate"}, env_with({})).help);
  EXPECT_TRUE(parse_train_args({"--batch-size=8", "--help"}, env_with({})).help);
  const std::string usage = train_usage();
  EXPECT_NE(usage.find("  --batch-size N"), std::string::npos) << usage;
  EXPECT_NE(usage.find("per-process batch size (default: 32)"), std::string::npos) << usage;
  EXPECT_NE(usage.find("--loss mse|cross-entropy|nll"), std::string::npos) << usage;
  EXPECT_NE(usage.find("--recover none|in-place"), std::string::npos) << usage;
  EXPECT_NE(usage.find("  -h, --help"), std::string::npos) << usage;
}

// The options a default can be shown for, as one line.
std::string summary(const TrainOptions& o) {
  const OptimizerOptions& p = o.optimizer;
  std::ostringstream line;
  line << o.batch_size << ' ' << to_string(o.workload) << ' ' << o.width << ' ' << o.samples << ' ' << to_string(p.kind)
       << ' ' << p.lr << ' ' << p.momentum << ' ' << p.beta1 << ',' << p.beta2 << ' ' << p.eps << ' '
       << to_string(p.schedule) << ' ' << p.step_epochs << ' ' << p.gamma << ' ' << p.warmup_steps << ' '
       << o.accumulate << ' ' << o.seed << ' ' << o.keep << ' ' << o.output << ' ' << o.timeout_seconds << ' '
       << o.bucket_cap_mb << ' ' << o.straggler_threshold_pct << ' ' << to_string(o.recover) << ' ' << o.min_ranks;
  return line.str();
}

// Every default the usage shows is a value the option takes, and gives back the same options as leaving it out:
// the usage's defaults are read from TrainOptions, not written beside it.
TEST(Cli, EveryDefaultTheUsageShowsParsesToTheDefault) {
  const std::string usage = train_usage();
  int checked = 0;
  for (size_t at = usage.find("\n  --"); at != std::string::npos; at = usage.find("\n  --", at + 1)) {
    const size_t name_end = usage.find_first_of(" \n", at + 3);
    const std::string name = usage.substr(at + 1 + 2, name_end - at - 3);
    const size_t next = usage.find("\n  -", at + 1);
    const std::string entry = usage.substr(at, next == std::string::npos ? std::string::npos : next - at);
    const size_t shown = entry.find("(default: ");
    if (shown == std::string::npos) continue;
    const std::string value = entry.substr(shown + 10, entry.find(')', shown) - shown - 10);
    const TrainOptions given = parse_train_args({name, value, "5", "1"}, env_with({})).options;
    const TrainOptions left_out = parse_train_args({"5", "1"}, env_with({})).options;
    EXPECT_EQ(summary(given), summary(left_out)) << name << " " << value;
    ++checked;
  }
  EXPECT_GE(checked, 20) << usage;
}

}  // namespace
}  // namespace ddp::runtime
