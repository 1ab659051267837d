// The TCP exchange and the cross-node protocols on it, with ranks as threads of this process on 127.0.0.1.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <thread>

#include "doctor/clock.hpp"
#include "doctor/gloo_allreduce.hpp"
#include "doctor/link_test.hpp"
#include "doctor/session.hpp"
#include "doctor/shared_dir.hpp"
#include "doctor/tcp_transport.hpp"
#include "test_support.hpp"

namespace ddp::doctor {
namespace {

using namespace std::chrono_literals;
using testing::contains;
using testing::TempDir;

uint16_t free_port() {
  const Socket probe = Socket::listen_on("127.0.0.1", 0);
  return probe.local_port();
}

TcpExchangeSettings settings_for(uint16_t port, int rank, int world_size,
                                 std::chrono::milliseconds timeout = std::chrono::milliseconds(10000)) {
  return {"127.0.0.1", port, rank, world_size, "test-run", timeout};
}

// Runs one body per rank, each in its own thread with its own TCP exchange; rethrows the first failure.
void run_ranks(int world_size, const std::function<void(Transport&)>& body) {
  const uint16_t port = free_port();
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(world_size));
  for (int rank = 0; rank < world_size; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        const auto transport = open_tcp_exchange(settings_for(port, rank, world_size));
        body(*transport);
      } catch (...) {
        errors[static_cast<size_t>(rank)] = std::current_exception();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (const auto& error : errors) {
    if (error) std::rethrow_exception(error);
  }
}

std::string what_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(TcpExchange, RanksMeetAndRunCollectives) {
  run_ranks(3, [](Transport& t) {
    EXPECT_EQ(t.members(), (std::vector<int>{0, 1, 2}));
    EXPECT_EQ(all_gather(t, "from " + std::to_string(t.rank()), Deadline::after(5s)),
              (std::vector<std::string>{"from 0", "from 1", "from 2"}));
    EXPECT_EQ(broadcast(t, t.rank() == 0 ? "root says" : "", Deadline::after(5s)), "root says");
    const auto gathered = gather(t, std::to_string(t.rank() * 10), Deadline::after(5s));
    const std::vector<std::string> expected =
        t.rank() == 0 ? std::vector<std::string>{"0", "10", "20"} : std::vector<std::string>{};
    EXPECT_EQ(gathered, expected);
    barrier(t, Deadline::after(5s));
  });
}

TEST(TcpExchange, RankThatCannotReachRankZeroSaysWhereAndHowLong) {
  const uint16_t port = free_port();
  const auto started = std::chrono::steady_clock::now();
  const std::string error = what_of([&] { open_tcp_exchange(settings_for(port, 1, 2, 300ms)); });
  EXPECT_LT(std::chrono::steady_clock::now() - started, 3s);
  EXPECT_TRUE(contains(error, "cannot reach rank 0 at 127.0.0.1:" + std::to_string(port) + " within 0.3 s: "))
      << error;
  EXPECT_TRUE(contains(error, "connection refused")) << error;
  EXPECT_TRUE(contains(error, "TCP port " + std::to_string(port))) << error;
}

TEST(TcpExchange, RankZeroGoesOnWithoutRanksThatNeverCameAndReportsThem) {
  const uint16_t port = free_port();
  std::unique_ptr<Transport> rank1;
  std::thread joiner([&] { rank1 = open_tcp_exchange(settings_for(port, 1, 3)); });
  Launch launch;
  launch.master_addr = "127.0.0.1";
  launch.master_port = port;
  launch.world_size = 3;
  const auto started = std::chrono::steady_clock::now();
  const auto rank0 = open_tcp_exchange(settings_for(port, 0, 3, 500ms));
  joiner.join();
  EXPECT_LT(std::chrono::steady_clock::now() - started, 3s);
  EXPECT_EQ(rank0->members(), (std::vector<int>{0, 1}));
  EXPECT_EQ(rank1->members(), (std::vector<int>{0, 1}));
  const auto results = tcp_meeting_results(*rank0, launch, 500ms);
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].status, Status::Ok);
  EXPECT_EQ(results[0].detail, "2 of 3 ranks joined");
  EXPECT_EQ(results[1].rank, 2);
  EXPECT_EQ(results[1].status, Status::Fail);
  EXPECT_TRUE(contains(results[1].detail, "rank 2 did not reach rank 0 at 127.0.0.1:" + std::to_string(port)));
}

TEST(TcpExchange, ForeignRanksAndStrangersAreTurnedAway) {
  const uint16_t port = free_port();
  std::string refused;
  std::unique_ptr<Transport> rank1;
  std::thread others([&] {
    std::this_thread::sleep_for(100ms);
    // Something that is not a doctor connects and sends junk; then a doctor of a different size.
    Socket stranger = Socket::connect_to("127.0.0.1", port, Deadline::after(2s));
    stranger.send_all("GET / HTTP/1.0\r\n\r\n", Deadline::after(1s));
    refused = what_of([&] { open_tcp_exchange(settings_for(port, 1, 5)); });
    rank1 = open_tcp_exchange(settings_for(port, 1, 2));
  });
  const auto rank0 = open_tcp_exchange(settings_for(port, 0, 2, 5000ms));
  others.join();
  EXPECT_TRUE(contains(refused, "refused rank 1: it says WORLD_SIZE=5, rank 0 has WORLD_SIZE=2")) << refused;
  EXPECT_EQ(rank0->members(), (std::vector<int>{0, 1}));
}

TEST(TcpExchange, LostPeerIsAnErrorNotAHang) {
  const uint16_t port = free_port();
  std::thread leaver([&] { open_tcp_exchange(settings_for(port, 1, 2)); });  // closes its socket at once
  const auto rank0 = open_tcp_exchange(settings_for(port, 0, 2));
  leaver.join();
  const std::string error = what_of([&] { rank0->recv(1, Deadline::after(5s)); });
  EXPECT_TRUE(contains(error, "waiting for rank 1: connection closed by the peer")) << error;
  EXPECT_THROW(rank0->recv(7, Deadline::after(1s)), ExchangeError);
}

TEST(LinkTest, MeasuresBytesAndRoundTripsOverLoopback) {
  const Socket listener = Socket::listen_on("127.0.0.1", 0);
  std::thread server([&] { serve_link_test(listener, Deadline::after(10s)); });
  const LinkTestSize size{8u << 20, std::chrono::milliseconds(5000), 20};
  const LinkMeasurement measured = run_link_test("127.0.0.1", listener.local_port(), size, Deadline::after(10s));
  server.join();
  EXPECT_EQ(measured.bytes, 8u << 20);
  EXPECT_GT(measured.seconds, 0);
  EXPECT_GT(measured.rtt_seconds, 0);
  EXPECT_LT(measured.rtt_seconds, 0.5);
}

TEST(LinkTest, GradesAgainstTheGuidesMinimum) {
  const auto slow = grade_link({125'000'000, 1.0, 2e-3}, "rank 1 (node2)", 10, 500);
  EXPECT_EQ(slow[0].check, "net.p2p_bw");
  EXPECT_EQ(slow[0].status, Status::Warn);
  EXPECT_EQ(slow[0].value, "1.00 Gbit/s to rank 1 (node2)");
  EXPECT_EQ(slow[1].check, "net.p2p_rtt");
  EXPECT_EQ(slow[1].status, Status::Warn);
  EXPECT_EQ(slow[1].value, "2.00 ms to rank 1 (node2)");
  const auto fast = grade_link({12'500'000'000, 1.0, 30e-6}, "rank 1 (node2)", 10, 500);
  EXPECT_EQ(fast[0].status, Status::Ok);
  EXPECT_EQ(fast[1].status, Status::Ok);
}

TEST(LinkTest, RingOfNodeLeadersThatCanServe) {
  std::vector<Peer> peers(6);
  for (int r = 0; r < 6; ++r) peers[static_cast<size_t>(r)] = {r, "n" + std::to_string(r / 2), r % 2 == 0, "10.0.0.1", 4000, true};
  peers[4].data_address.clear();  // its interface failed its check
  const auto pairs = ring_pairs(peers);
  ASSERT_EQ(pairs.size(), 2u);
  EXPECT_EQ(pairs[0].first.rank, 0);
  EXPECT_EQ(pairs[0].second.rank, 2);
  EXPECT_EQ(pairs[1].first.rank, 2);
  EXPECT_EQ(pairs[1].second.rank, 0);
  EXPECT_TRUE(ring_pairs({peers[0], peers[1]}).empty());
}

TEST(LinkTest, PairsRunOverTheExchangeAndRankZeroGetsEveryResult) {
  std::vector<CheckResult> at_rank0;
  run_ranks(3, [&](Transport& t) {
    const Socket listener = Socket::listen_on("127.0.0.1", 0);
    Peer me{t.rank(), "host" + std::to_string(t.rank()), true, "127.0.0.1", listener.local_port(), false};
    const auto peers = exchange_peers(t, me, Deadline::after(5s));
    LinkSettings settings{{4u << 20, 2000ms, 5}, 0.001, 1e6, 5000ms, nullptr};
    const auto results = check_links(t, peers, listener, settings);
    if (t.rank() == 0) at_rank0 = results;
  });
  ASSERT_EQ(at_rank0.size(), 6u);  // 3 pairs, bandwidth and round trip each
  const std::vector<std::pair<int, std::string>> expected{
      {0, "to rank 1 (host1)"}, {1, "to rank 2 (host2)"}, {2, "to rank 0 (host0)"}};
  for (size_t i = 0; i < expected.size(); ++i) {
    const CheckResult& bandwidth = at_rank0[2 * i];
    EXPECT_EQ(bandwidth.check, "net.p2p_bw");
    EXPECT_EQ(bandwidth.status, Status::Ok) << bandwidth.detail;
    EXPECT_EQ(bandwidth.rank, expected[i].first);
    EXPECT_TRUE(contains(bandwidth.value, expected[i].second)) << bandwidth.value;
    EXPECT_EQ(bandwidth.detail.rfind("4 MiB in ", 0), 0u) << bandwidth.detail;
  }
}

TEST(LinkTest, AServerNobodyCanReachIsAFailWithTheAddress) {
  std::vector<CheckResult> at_rank0;
  run_ranks(2, [&](Transport& t) {
    const Socket listener = Socket::listen_on("127.0.0.1", 0);
    // Rank 1 advertises a port it does not listen on, as a firewall that drops all but MASTER_PORT would.
    const uint16_t advertised = t.rank() == 1 ? free_port() : listener.local_port();
    Peer me{t.rank(), "host" + std::to_string(t.rank()), true, "127.0.0.1", advertised, false};
    const auto peers = exchange_peers(t, me, Deadline::after(5s));
    LinkSettings settings{{1u << 20, 500ms, 2}, 0.001, 1e6, 1000ms, nullptr};
    const auto results = check_links(t, peers, listener, settings);
    if (t.rank() == 0) at_rank0 = results;
  });
  ASSERT_FALSE(at_rank0.empty());
  EXPECT_EQ(at_rank0[0].rank, 0);
  EXPECT_EQ(at_rank0[0].status, Status::Fail);
  EXPECT_TRUE(contains(at_rank0[0].detail, "cannot test the link to rank 1 (host1) at 127.0.0.1:")) << at_rank0[0].detail;
}

TEST(SharedDir, TokensOfOtherNodesMustBeReadable) {
  TempDir shared;
  TempDir elsewhere;
  write_token(shared.path(), "n1", 0);
  write_token(shared.path(), "n1", 1);
  write_token(elsewhere.path(), "n1", 2);
  testing::write_file(token_path(shared.path(), "n1", 3), "ddp-doctor run OLD rank 3\n");  // a stale file
  EXPECT_EQ(missing_tokens(shared.path(), "n1", {0, 1, 2, 3}, 0ms), (std::vector<int>{2, 3}));
  std::vector<Peer> others{{2, "node3", true, "", 0, true}};
  const CheckResult result = grade_shared(shared.path(), {2}, others);
  EXPECT_EQ(result.status, Status::Fail);
  EXPECT_EQ(result.value, "0 of 1 other node(s)");
  EXPECT_TRUE(contains(result.detail, "files written by rank 2 (node3) do not appear in"));
  EXPECT_EQ(grade_shared(shared.path(), {}, others).status, Status::Ok);
}

std::vector<CheckResult> shared_dir_run(const std::vector<std::string>& dirs) {
  std::vector<CheckResult> all(dirs.size());
  run_ranks(static_cast<int>(dirs.size()), [&](Transport& t) {
    Peer me{t.rank(), "host" + std::to_string(t.rank()), true, "", 0, true};
    const auto peers = exchange_peers(t, me, Deadline::after(5s));
    const auto mine = check_shared_dir(t, peers, dirs[static_cast<size_t>(t.rank())], 5000ms);
    ASSERT_EQ(mine.size(), 1u);
    all[static_cast<size_t>(t.rank())] = mine[0];
  });
  return all;
}

TEST(SharedDir, SameDirectoryOnEveryRankPassesAndIsLeftClean) {
  TempDir shared;
  for (const auto& result : shared_dir_run({shared.path(), shared.path(), shared.path()})) {
    EXPECT_EQ(result.status, Status::Ok) << result.detail;
    EXPECT_EQ(result.value, "2 of 2 other node(s)");
  }
  EXPECT_TRUE(std::filesystem::is_empty(shared.path()));
}

TEST(SharedDir, PrivateDirectoriesFailOnEveryRank) {
  TempDir a;
  TempDir b;
  const auto results = shared_dir_run({a.path(), b.path()});
  EXPECT_EQ(results[0].status, Status::Fail);
  EXPECT_TRUE(contains(results[0].detail, "files written by rank 1 (host1)"));
  EXPECT_EQ(results[1].status, Status::Fail);
  EXPECT_TRUE(contains(results[1].detail, "files written by rank 0 (host0)"));
}

TEST(Clock, OffsetsOfRanksSharingOneClockAreNearZero) {
  std::vector<CheckResult> at_rank0;
  run_ranks(3, [&](Transport& t) {
    Peer me{t.rank(), "host", t.rank() != 2, "", 0, false};  // rank 2 is not a node leader
    const auto peers = exchange_peers(t, me, Deadline::after(5s));
    const auto results = measure_clock_offsets(t, peers, 4, 100, 300, 5000ms);
    if (t.rank() == 0) at_rank0 = results;
  });
  ASSERT_EQ(at_rank0.size(), 2u);
  EXPECT_EQ(at_rank0[0].value, "0 (reference)");
  EXPECT_EQ(at_rank0[1].rank, 1);
  EXPECT_EQ(at_rank0[1].status, Status::Ok);
}

TEST(GlooAllreduce, SumsAreRightOnEveryRankAtEverySize) {
  const std::vector<AllreduceSize> sizes{{4u << 10, 2}, {256u << 10, 2}};
  std::vector<CheckResult> at_rank0;
  run_ranks(3, [&](Transport& t) {
    const auto gloo = make_gloo_backend();
    CollectiveSetup setup;
    setup.member_index = t.rank();
    setup.data_address = "127.0.0.1";
    setup.timeout = 10000ms;
    const auto results = check_allreduce(t, *gloo, setup, sizes, nullptr);
    if (t.rank() == 0) at_rank0 = results;
  });
  ASSERT_EQ(at_rank0.size(), 2u);
  for (size_t i = 0; i < sizes.size(); ++i) {
    EXPECT_EQ(at_rank0[i].check, "allreduce.gloo");
    EXPECT_EQ(at_rank0[i].status, Status::Ok) << at_rank0[i].detail;
    EXPECT_EQ(at_rank0[i].rank, CheckResult::kWholeRun);
    EXPECT_TRUE(contains(at_rank0[i].detail, "3 ranks"));
  }
  EXPECT_TRUE(contains(at_rank0[1].value, "@ 256 KiB"));
}

TEST(GlooAllreduce, ARankWithoutAnAddressFailsTheRunWithItsReason) {
  std::vector<CheckResult> at_rank0;
  run_ranks(2, [&](Transport& t) {
    const auto gloo = make_gloo_backend();
    CollectiveSetup setup;
    setup.member_index = t.rank();
    setup.data_address = t.rank() == 1 ? "" : "127.0.0.1";
    setup.timeout = 2000ms;
    const auto results = check_allreduce(t, *gloo, setup, {{4u << 10, 1}}, nullptr);
    if (t.rank() == 0) at_rank0 = results;
  });
  ASSERT_EQ(at_rank0.size(), 1u);
  EXPECT_EQ(at_rank0[0].status, Status::Fail);
  EXPECT_TRUE(contains(at_rank0[0].detail, "rank 1: no usable address on this rank's interface")) << at_rank0[0].detail;
}

}  // namespace
}  // namespace ddp::doctor
