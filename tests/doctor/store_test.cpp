// Attacks on the doctor's store and wire format, each performed: lengths and counts a peer made
// up, connections that stay silent, oversized frames, a nonce that is a path, terminal escapes in peer text,
// and a field long enough to blow up the report.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <chrono>
#include <thread>

#include "base/socket.hpp"
#include "doctor/run/group.hpp"
#include "doctor/run/report.hpp"
#include "doctor/run/shared_dir.hpp"
#include "store/store.hpp"
#include "store/wire.hpp"
#include "test_support.hpp"

namespace ddp::doctor {
namespace {

using namespace std::chrono_literals;
using testing::budget_of;
using testing::contains;
using testing::error_of;
using testing::on_threads;
using testing::TempDir;

Launch rank_of_two(int rank, uint16_t port) {
  Launch launch;
  launch.source = LaunchSource::Torchrun;
  launch.rank = rank;
  launch.world_size = 2;
  launch.master_addr = "127.0.0.1";
  launch.master_port = port;
  launch.run_id = "attack";
  return launch;
}

// What rank 1 makes of a list of members that a rank 0 under the attacker's control published.
std::string members_seen_by_rank1(const std::string& members) {
  StoreServer server(0, "attack", 2);
  StoreClient forged_rank0("127.0.0.1", server.port(), {"attack", 2, 0, ""}, 2s);
  forged_rank0.set("members", members, Deadline::after(2s));
  return error_of<ExchangeError>([&] { meet(rank_of_two(1, server.port()), budget_of(2s), nullptr); });
}

TEST(WireAttack, MemberCountsOfMinusOneOrTwoToThe28AreRefusedBeforeAnyAllocation) {
  EXPECT_TRUE(contains(members_seen_by_rank1(WireWriter().put_int(-1).bytes()), "-1 is not within 1..1"));
  EXPECT_TRUE(contains(members_seen_by_rank1(WireWriter().put_int(1 << 28).bytes()), "268435456 is not within 1..2"));
  // However large the run, a count is never above the fields the message holds.
  EXPECT_THROW(decode_members(WireWriter().put_int(1000).put_int(0).bytes(), 1 << 20, 0), ExchangeError);
  EXPECT_TRUE(
      contains(members_seen_by_rank1(WireWriter().put_int(2).put_int(0).put_int(7).bytes()), "7 is not within 0..1"));
  EXPECT_TRUE(contains(members_seen_by_rank1(WireWriter().put_int(1).put_int(0).bytes()),
                       "rank 0 stopped waiting for the other ranks before rank 1 joined"));
}

TEST(WireAttack, ResultCountsAndLengthsBeyondTheMessageAreRefused) {
  for (const int64_t count : {int64_t{-1}, int64_t{1} << 28, int64_t{1} << 62}) {
    EXPECT_THROW(decode_results(WireWriter().put_int(count).bytes()), ExchangeError) << count;
  }
  std::string length_past_end = WireWriter().put_int(1).bytes();
  length_past_end += std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8);
  EXPECT_THROW(decode_results(length_past_end), ExchangeError);
  const std::string status_out_of_range =
      WireWriter().put_int(1).put("c").put_int(9).put("").put("").put("").put("").put_int(0).bytes();
  EXPECT_THROW(decode_results(status_out_of_range), ExchangeError);
}

TEST(WireAttack, PeerTextReachesTheReportWithoutTerminalEscapesAndCutToMaxField) {
  CheckResult evil =
      make_result(checks::kLinkBandwidth, Status::Ok, "\x1b]0;owned\x07 9 Gbit/s", "", std::string(1 << 20, 'x'));
  evil.host =
      "node\x1b[2J\x9b"
      "1";
  evil.rank = 1;
  const auto decoded = decode_results(encode_results({evil}));
  ASSERT_EQ(decoded.size(), 1u);
  EXPECT_EQ(decoded[0].host, "node?[2J?1");
  EXPECT_EQ(decoded[0].value, "?]0;owned? 9 Gbit/s");
  EXPECT_EQ(decoded[0].detail.size(), kMaxField + 3);  // cut, with "..."
  Report report;
  report.results = {evil};
  const std::string table = format_table(report);
  EXPECT_EQ(table.find('\x1b'), std::string::npos);
  EXPECT_EQ(table.find('\x9b'), std::string::npos);
  EXPECT_EQ(table.find('\x07'), std::string::npos);
}

TEST(WireAttack, OneLongFieldDoesNotPadEveryRowOfTheReport) {
  Report report;
  for (int rank = 0; rank < 200; ++rank) {
    CheckResult row = make_result(checks::kCpuCores, Status::Ok, "2 core(s)", "", "detail");
    row.rank = rank;
    row.host = "node";
    report.results.push_back(row);
  }
  report.results[7].value = std::string(4 << 20, 'v');  // 4 MiB
  const std::string table = format_table(report);
  EXPECT_LT(table.size(), 64u << 10) << "the table grew with the long field";
  EXPECT_LT(format_json(report).size(), 64u << 10);
}

TEST(StoreAttack, SilentStrangersDelayNobodyAndAreDroppedAfterTheirGreetingTime) {
  StoreServer server(0, "attack", 3);
  std::vector<Socket> strangers;
  for (int i = 0; i < 30; ++i) strangers.push_back(Socket::connect_to("127.0.0.1", server.port(), Deadline::after(2s)));
  strangers[0].send_all(std::string("\x10\x00\x00\x00partial", 11), Deadline::after(1s));  // a frame never finished
  // Three ranks, each allowed 1 s: read one stranger after the other for kGreetingWait each, they would never get in.
  on_threads(3, [&](int rank) { StoreClient("127.0.0.1", server.port(), {"attack", 3, rank, ""}, 1s); });
  EXPECT_EQ(server.wait_for_ranks(Deadline::after(1s)), (std::vector<int>{0, 1, 2}));
  for (const Socket& stranger : strangers) {
    char byte = 0;
    EXPECT_THROW(stranger.recv_exact(&byte, 1, Deadline::after(kGreetingWait + 3s)), NetError);  // closed by rank 0
  }
}

constexpr const char* kKey = "0123456789abcdef0123456789abcdef";

// An outsider who read the run id and size from squeue, and the port from /proc/net/tcp, greets as a free rank.
// Without the job's key it takes no slot and can set no key; the real rank then joins.
TEST(StoreAttack, AnOutsiderWithoutTheJobsKeyTakesNoRankSlotAndSetsNoKey) {
  StoreServer server(0, "812.0", 3, kKey);
  StoreClient rank0("127.0.0.1", server.port(), {"812.0", 3, 0, kKey}, 2s);
  // Through the client: it already finds that it cannot check rank 0's proof, and gives up.
  for (const std::string& guess : {std::string(), std::string(32, '0')}) {
    const auto greet = [&] { StoreClient("127.0.0.1", server.port(), {"812.0", 3, 2, guess}, 2s); };
    const std::string error = error_of<ExchangeError>(greet);
    EXPECT_TRUE(contains(error, "cannot prove that it knows this job's key")) << error;
  }
  // By hand: the outsider answers the challenge with anything, then tries to set the link test's address.
  Socket outsider = Socket::connect_to("127.0.0.1", server.port(), Deadline::after(2s));
  outsider.send_frame(WireWriter().put("ddp-doctor/3").put("812.0").put_int(3).put_int(1).put("n").bytes(),
                      Deadline::after(2s));
  EXPECT_EQ(WireReader(outsider.recv_frame(Deadline::after(2s), kMaxFrame)).get(), "challenge");
  outsider.send_frame(WireWriter().put(std::string(64, 'f')).bytes(), Deadline::after(2s));
  WireReader verdict(outsider.recv_frame(Deadline::after(2s), kMaxFrame));
  EXPECT_EQ(verdict.get(), "refused");
  EXPECT_EQ(verdict.get_text(),
            "it cannot prove that it knows this job's key (DDP_JOB_KEY): it is no rank of this job");
  try {
    outsider.send_frame(WireWriter().put("set").put("link/1").put("10.0.0.66:1").bytes(), Deadline::after(2s));
    outsider.recv_frame(Deadline::after(2s), kMaxFrame);
    ADD_FAILURE() << "the outsider's set was answered";
  } catch (const NetError&) {
  }
  on_threads(2, [&](int i) { StoreClient("127.0.0.1", server.port(), {"812.0", 3, i + 1, kKey}, 2s); });
  EXPECT_EQ(server.wait_for_ranks(Deadline::after(1s)), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(error_of<ExchangeError>([&] { rank0.get("link/1", "the outsider's key", Deadline::after(200ms)); }),
            "the outsider's key: timed out");
}

// Strangers that connect and say nothing hold every place the server has (before: the ranks plus 64): the ranks
// must still get in, each within its own second.
TEST(StoreAttack, StrangersHoldingEveryPlaceKeepNoRankOut) {
  StoreServer server(0, "812.0", 2, kKey);
  std::vector<Socket> strangers;
  for (size_t i = 0; i < 2 * kMaxPending + 2; ++i) {
    strangers.push_back(Socket::connect_to("127.0.0.1", server.port(), Deadline::after(2s)));
  }
  on_threads(2, [&](int rank) { StoreClient("127.0.0.1", server.port(), {"812.0", 2, rank, kKey}, 1s); });
  EXPECT_EQ(server.wait_for_ranks(Deadline::after(1s)), (std::vector<int>{0, 1}));
}

// The other way round: a program that holds MASTER_PORT before rank 0 cannot pass for rank 0's store.
TEST(StoreAttack, ARankRefusesAServerThatCannotProveTheJobsKey) {
  StoreServer impostor(0, "812.0", 2, std::string(32, 'e'));
  const auto greet = [&] { StoreClient("127.0.0.1", impostor.port(), {"812.0", 2, 1, kKey}, 2s); };
  const std::string error = error_of<ExchangeError>(greet);
  EXPECT_TRUE(contains(error,
                       "cannot prove that it knows this job's key (DDP_JOB_KEY): its proof does not verify; it "
                       "is not this job's rank 0"))
      << error;
  EXPECT_EQ(greeting_proof(kKey, "client", {"a", "b"}), greeting_proof(kKey, "client", {"a", "b"}));
  EXPECT_NE(greeting_proof(kKey, "client", {"a", "b"}), greeting_proof(kKey, "server", {"a", "b"}));
  EXPECT_NE(greeting_proof(kKey, "client", {"ab", ""}), greeting_proof(kKey, "client", {"a", "b"}));
  EXPECT_EQ(greeting_proof(kKey, "client", {}).size(), 64u);
}

// A server that answers the greeting with a bare "ok", skipping its challenge and proof, is refused: the rank sends
// it no request (before, it got the next one, `get members`).
TEST(StoreAttack, ARankRefusesAServerThatSkipsItsProof) {
  const Socket listener = Socket::listen_on("127.0.0.1", 0);
  std::string after_ok = "nothing";
  std::thread fake([&] {
    const Socket socket = listener.accept(Deadline::after(5s));
    socket.recv_frame(Deadline::after(2s), 4096);
    socket.send_frame(WireWriter().put("ok").bytes(), Deadline::after(2s));
    try {
      after_ok = socket.recv_frame(Deadline::after(2s), 4096);
    } catch (const NetError&) {
      // closed or silent: the rank sent nothing more
    }
  });
  const std::string error = error_of<ExchangeError>([&] {
    StoreClient("127.0.0.1", listener.local_port(), {"812.0", 2, 1, kKey}, 2s).get("members", "", Deadline::after(2s));
  });
  fake.join();
  EXPECT_TRUE(contains(error,
                       "cannot prove that it knows this job's key (DDP_JOB_KEY): it answered the greeting "
                       "without proving it"))
      << error;
  EXPECT_EQ(after_ok, "nothing");
}

TEST(StoreAttack, AFrameOverTheLimitClosesThatConnectionOnly) {
  StoreServer server(0, "attack", 2);
  StoreClient rank0("127.0.0.1", server.port(), {"attack", 2, 0, ""}, 2s);
  Socket liar = Socket::connect_to("127.0.0.1", server.port(), Deadline::after(2s));
  liar.send_all(std::string("\xff\xff\xff\x7f", 4), Deadline::after(1s));  // announces 2 GiB
  char byte = 0;
  EXPECT_THROW(liar.recv_exact(&byte, 1, Deadline::after(5s)), NetError);
  rank0.set("still", "serving", Deadline::after(2s));
  EXPECT_EQ(rank0.get("still", "reading back", Deadline::after(2s)), "serving");
}

TEST(StoreAttack, ANonceThatIsAPathNeverReachesTheFileSystem) {
  TempDir snapshots;
  StoreServer server(0, "attack", 2);
  StoreClient forged_rank0("127.0.0.1", server.port(), {"attack", 2, 0, ""}, 2s);
  auto store = std::make_unique<StoreClient>("127.0.0.1", server.port(), Greeting{"attack", 2, 1, ""}, 2s);
  Group rank1(nullptr, std::move(store), 1, {0, 1}, "test");
  forged_rank0.set("nonce/1", "/../../../tmp/ddp-owned", Deadline::after(2s));
  const std::vector<Peer> peers{{0, "node1", true, "", true, {}}, {1, "node2", true, "", true, {}}};
  const std::string error =
      error_of<ExchangeError>([&] { check_shared_dir(rank1, peers, snapshots.path(), Deadline::after(2s)); });
  EXPECT_TRUE(contains(error, "rank 0 sent a malformed nonce '/../../../tmp/ddp-owned'")) << error;
  EXPECT_TRUE(std::filesystem::is_empty(snapshots.path()));
  EXPECT_FALSE(valid_nonce(""));
  EXPECT_FALSE(valid_nonce(std::string(32, 'g')));
  EXPECT_TRUE(valid_nonce(new_nonce()));
}

}  // namespace
}  // namespace ddp::doctor
