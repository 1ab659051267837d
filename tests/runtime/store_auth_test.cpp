// Rank 0's rendezvous store against outsiders: anyone who reaches MASTER_PORT can try PyTorch's own TCPStore client
// on it. Here an outsider does so against a real ddp-train run's store and sets the keys Gloo's connectFullMesh waits
// for, or the peer check's answers, by the names they would have without the job's secret prefix: the project's
// store takes nothing from a client that does not prove the job's key, and the run must not notice. Real ddp-train
// processes on 127.0.0.1.
#include <gtest/gtest.h>
#include <signal.h>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <optional>
#include <string>
#include <vector>

#include "core/netif.hpp"
#include "ddp_runtime/common/c10d_compat.hpp"
#include "ddp_runtime/distributed/recovery.hpp"
#include "ddp_runtime/distributed/store_auth.hpp"
#include "test_common.hpp"
#include "test_support.hpp"

namespace ddp::runtime {
namespace {

using ddp::testing::contains;
using testing::ddp_train;

constexpr char kJobKey[] = "0123456789abcdef0123456789abcdef";

TEST(StoreAuth, TheKeyPrefixNeedsTheJobKeyAndTheAttempt) {
  Launch launch;
  launch.run_id = "4711.0";
  launch.job_key = kJobKey;
  const std::string prefix = store_key_prefix(launch);
  EXPECT_EQ(prefix.size(), kHmacHexDigits);
  Launch other_key = launch;
  other_key.job_key = "ffffffffffffffffffffffffffffffff";
  EXPECT_NE(store_key_prefix(other_key), prefix);
  Launch next_attempt = launch;
  next_attempt.restart_count = 1;
  EXPECT_NE(store_key_prefix(next_attempt), prefix);
}

// Recovery's records (the leader, reports, member lists, requests, admissions, the group file) verify only as what
// they were sealed as: a record of another generation, attempt, run or job, or one changed on the way, is refused.
TEST(StoreAuth, ARecordOpensOnlyUnderItsOwnNameRunAttemptAndJob) {
  Launch launch;
  launch.job_key = kJobKey;
  const std::string sealed = seal_record(launch, "4711", "g3/list", "formed\n\n3\n");
  EXPECT_EQ(open_record(launch, "4711", "g3/list", sealed), std::optional<std::string>("formed\n\n3\n"));
  EXPECT_EQ(open_record(launch, "4711", "g4/list", sealed), std::nullopt) << "replayed at the next generation";
  EXPECT_EQ(open_record(launch, "4712", "g3/list", sealed), std::nullopt) << "another run's";
  Launch next_attempt = launch;
  next_attempt.restart_count = 1;
  EXPECT_EQ(open_record(next_attempt, "4711", "g3/list", sealed), std::nullopt) << "the last attempt's";
  Launch other_job = launch;
  other_job.job_key = "ffffffffffffffffffffffffffffffff";
  EXPECT_EQ(open_record(other_job, "4711", "g3/list", sealed), std::nullopt) << "another job's";
  std::string changed = sealed;
  changed.back() = '4';
  EXPECT_EQ(open_record(launch, "4711", "g3/list", changed), std::nullopt) << "changed on the way";
  EXPECT_EQ(open_record(launch, "4711", "g3/list", "formed\n\n3\n"), std::nullopt) << "never sealed";
  EXPECT_EQ(open_record(launch, "4711", "g3/list", ""), std::nullopt);
}

// The state rank 0 sends at a heal: its MAC changes with any byte and with the generation.
TEST(StoreAuth, TheStatesMacCoversEveryByteAndTheGeneration) {
  Launch launch;
  launch.job_key = kJobKey;
  std::string state(1000, 'x');
  const std::string mac = state_mac(launch, "4711", 2, state.data(), state.size());
  EXPECT_EQ(mac.size(), kStateMacLength);
  EXPECT_NE(state_mac(launch, "4711", 3, state.data(), state.size()), mac);
  state[999] = 'y';
  EXPECT_NE(state_mac(launch, "4711", 2, state.data(), state.size()), mac);
}

// A TCPStore client of the store at 127.0.0.1:port, as any program on the machine can make one.
compat::StorePtr outsider(const std::string& port) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(std::stoi(port));
  options.isServer = false;
  options.waitWorkers = false;
  // Short: LibTorch 2.14's client retries a server that resets it for as long as its timeout.
  options.timeout = std::chrono::seconds(2);
  return compat::make_tcp_store("127.0.0.1", options);
}

std::vector<uint8_t> bytes(const std::string& text) { return std::vector<uint8_t>(text.begin(), text.end()); }

// Gloo's connectFullMesh on device 0 waits for the key "0/<peer rank>" (LibTorch 1.13, 2.6 and 2.14 alike). An
// outsider sets rank 1's before rank 1 starts: without the prefix, rank 0 takes it for rank 1's address.
TEST(StoreAuth, AnOutsiderCannotSetTheKeysGlooWaitsFor) {
  const std::string dir = testing::make_temp_dir();
  const std::string port = std::to_string(testing::free_port());
  testing::Env env{{"WORLD_SIZE", "2"},      {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", port},
                   {"DDP_JOB_KEY", kJobKey}, {"GLOO_SOCKET_IFNAME", "lo"}, {"RANK", "0"}};
  const std::vector<std::string> argv{
      ddp_train(), "--snapshot-dir", dir, "--output", dir + "/final.pt", "--timeout", "20", "2", "0"};
  const testing::Process rank0 = testing::spawn(argv, env, dir + "/rank0.log");
  // PyTorch's own client cannot even greet the project's store; were it to, the keys lie under the job's prefix.
  try {
    const compat::StorePtr store = outsider(port);
    store->set("0/1", bytes("an outsider's idea of rank 1's address"));
    store->set("0/rank_1", bytes("elsewhere"));  // the host name LibTorch 1.13's Gloo reads beside it
  } catch (const std::exception&) {
    // refused: it proves no key
  }
  env["RANK"] = "1";
  const testing::Process rank1 = testing::spawn(argv, env, dir + "/rank1.log");
  const int status0 = testing::wait_at_most(rank0, std::chrono::seconds(60));
  const int status1 = testing::wait_at_most(rank1, std::chrono::seconds(60));
  const std::string output0 = testing::read_text(rank0.output_path);
  EXPECT_EQ(status0, 0) << output0;
  EXPECT_EQ(status1, 0) << testing::read_text(rank1.output_path);
  EXPECT_TRUE(contains(output0, "Final model saved at " + dir + "/final.pt")) << output0;
}

// A stopped rank must be named after the timeout even when an outsider has said, in the peer check's own words and
// ahead of time, that it is alive.
TEST(StoreAuth, AnOutsiderCannotAnswerThePeerCheckForAStoppedRank) {
  const std::string dir = testing::make_temp_dir();
  const std::vector<std::string> argv = testing::mlp_command(dir, "64", {"--timeout", "2", "10000", "0"});
  auto ranks = testing::spawn_ranks(2, argv, dir, {{"DDP_JOB_KEY", kJobKey}});
  ASSERT_TRUE(testing::wait_for_text(ranks[0].output_path, "Epoch 1 | Loss", ranks[0]))
      << testing::read_text(ranks[0].output_path);
  std::string port;
  {
    // The port spawn_ranks picked, from rank 0's environment.
    const std::string environ = testing::read_text("/proc/" + std::to_string(ranks[0].pid) + "/environ");
    const std::size_t at = environ.find("MASTER_PORT=");
    ASSERT_NE(at, std::string::npos);
    port = environ.substr(at + 12, environ.find('\0', at) - at - 12);
  }
  try {
    const compat::StorePtr store = outsider(port);
    for (const std::string prefix : {"ddp-train/peer-check/", "peer-check/"}) {
      store->set(prefix + "alive/1", bytes("1"));
      store->add(prefix + "answered", 1);
    }
  } catch (const std::exception&) {
    // refused: it proves no key
  }
  kill(ranks[1].pid, SIGSTOP);
  const int status = testing::wait_at_most(ranks[0], std::chrono::seconds(60));
  kill(ranks[1].pid, SIGKILL);
  kill(ranks[1].pid, SIGCONT);
  testing::wait_for(ranks[1]);
  const std::string output = testing::read_text(ranks[0].output_path);
  EXPECT_EQ(status, 1) << output;
  EXPECT_TRUE(contains(
      output, "ddp-train: rank 1 on " + host_name() + " (cpu) did not answer within 3 s after a collective failed ("))
      << output;
}

}  // namespace
}  // namespace ddp::runtime
