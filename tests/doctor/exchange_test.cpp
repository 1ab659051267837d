// The ranks' store and group, and the cross-node checks on them, with ranks as threads of this process on
// 127.0.0.1. Attacks on the store and its messages are in store_test.cpp.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <future>

#include "doctor/clock.hpp"
#include "doctor/gloo.hpp"
#include "doctor/group.hpp"
#include "doctor/link_test.hpp"
#include "doctor/shared_dir.hpp"
#include "test_support.hpp"

namespace ddp::doctor {
namespace {

using namespace std::chrono_literals;
using testing::budget_of;
using testing::contains;
using testing::on_threads;
using testing::TempDir;

Launch launch_of(int rank, int world_size, uint16_t port) {
  Launch launch;
  launch.source = LaunchSource::Torchrun;
  launch.rank = rank;
  launch.world_size = world_size;
  launch.master_addr = "127.0.0.1";
  launch.master_port = port;
  launch.run_id = "test-run";
  return launch;
}

// Runs one body per rank, each in a thread with its own group; rethrows the first failure. Rank 0's store listens
// on a port the kernel picks, handed to the others as under mpirun: no port can be taken in between.
void run_ranks(int world_size, const std::function<void(Group&)>& body) {
  std::promise<uint16_t> port;
  const std::shared_future<uint16_t> shared_port = port.get_future().share();
  const MasterSharer share = [&](Launch& launch) {
    if (launch.rank == 0) port.set_value(launch.master_port);
    launch.master_addr = "127.0.0.1";
    launch.master_port = shared_port.get();
  };
  on_threads(world_size, [&](int rank) {
    Launch launch = launch_of(rank, world_size, 0);
    launch.source = LaunchSource::OpenMpi;
    launch.master_addr.clear();
    const Meeting meeting = meet(launch, budget_of(10s), share);
    body(*meeting.group);
    meeting.group->barrier("test done", Deadline::after(10s));
    meeting.group->finish(Deadline::after(10s));
  });
}

std::string what_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// A port held by a socket that is bound but does not listen: connecting to it is refused, and no other process
// can take it while the test runs.
struct RefusingPort {
  Socket socket = Socket(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  uint16_t port = 0;
  RefusingPort() {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof address;
    bind(socket.fd(), reinterpret_cast<sockaddr*>(&address), sizeof address);
    getsockname(socket.fd(), reinterpret_cast<sockaddr*>(&address), &length);
    port = ntohs(address.sin_port);
  }
};

TEST(Group, RanksMeetAndRunCollectives) {
  run_ranks(3, [](Group& g) {
    EXPECT_EQ(g.members(), (std::vector<int>{0, 1, 2}));
    EXPECT_EQ(g.describe(), "mpi");
    EXPECT_EQ(g.all_gather("a", "from " + std::to_string(g.rank()), Deadline::after(5s)),
              (std::vector<std::string>{"from 0", "from 1", "from 2"}));
    EXPECT_EQ(g.broadcast("b", g.rank() == 0 ? "root says" : "", Deadline::after(5s)), "root says");
    const auto gathered = g.gather("c", std::to_string(g.rank() * 10), Deadline::after(5s));
    const std::vector<std::string> expected =
        g.rank() == 0 ? std::vector<std::string>{"0", "10", "20"} : std::vector<std::string>{};
    EXPECT_EQ(gathered, expected);
    g.barrier("d", Deadline::after(5s));
  });
}

TEST(Group, OneProcessAloneGetsItsOwnData) {
  const Meeting meeting = meet(Launch{}, budget_of(1s), nullptr);
  Group& alone = *meeting.group;
  EXPECT_EQ(alone.describe(), "single");
  EXPECT_EQ(alone.all_gather("a", "mine", Deadline::after(1s)), std::vector<std::string>{"mine"});
  EXPECT_EQ(alone.broadcast("b", "root", Deadline::after(1s)), "root");
  EXPECT_EQ(alone.store(), nullptr);
}

TEST(Group, RankThatCannotReachRankZeroSaysWhereAndHowLong) {
  const RefusingPort nobody;
  const std::string error = what_of([&] { meet(launch_of(1, 2, nobody.port), budget_of(300ms), nullptr); });
  EXPECT_TRUE(contains(error, "cannot reach rank 0 at 127.0.0.1:" + std::to_string(nobody.port) + " within 0.3 s: "))
      << error;
  EXPECT_TRUE(contains(error, "connection refused")) << error;
  EXPECT_TRUE(contains(error, "TCP port " + std::to_string(nobody.port))) << error;
}

TEST(Group, RankZeroGoesOnWithoutRanksThatNeverCameAndReportsThem) {
  const uint16_t port = ddp::testing::reserve_port();
  Meeting rank0, rank1;
  on_threads(2, [&](int rank) {
    (rank == 0 ? rank0 : rank1) = meet(launch_of(rank, 3, port), budget_of(rank == 0 ? 1s : 5s), nullptr);
  });
  EXPECT_EQ(rank0.group->members(), (std::vector<int>{0, 1}));
  EXPECT_EQ(rank1.group->members(), (std::vector<int>{0, 1}));
  EXPECT_EQ(rank0.group->describe(), "tcp 127.0.0.1:" + std::to_string(port));
  const auto& results = rank0.results;
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].status, Status::Ok);
  EXPECT_EQ(results[0].value, "listening on " + std::to_string(port));
  EXPECT_EQ(results[0].detail, "2 of 3 ranks joined");
  EXPECT_EQ(results[1].rank, 2);
  EXPECT_EQ(results[1].status, Status::Fail);
  EXPECT_TRUE(contains(results[1].detail, "rank 2 did not reach rank 0 at 127.0.0.1:" + std::to_string(port)));
  EXPECT_EQ(rank1.results.at(0).value, "reached 127.0.0.1:" + std::to_string(port));
  rank1.group->finish(Deadline::after(1s));
  rank0.group->finish(Deadline::after(5s));
}

TEST(Group, ForeignRanksAreTurnedAwayWithTheReason) {
  StoreServer server(0, "test-run", 2);
  const std::string other_size = what_of([&] { StoreClient("127.0.0.1", server.port(), {"test-run", 5, 1, ""}, 2s); });
  EXPECT_TRUE(contains(other_size, "refused rank 1: it says WORLD_SIZE=5, rank 0 has WORLD_SIZE=2")) << other_size;
  const std::string other_run = what_of([&] { StoreClient("127.0.0.1", server.port(), {"7.0", 2, 1, ""}, 2s); });
  EXPECT_TRUE(contains(other_run, "it belongs to run 7.0, this is run test-run")) << other_run;
  StoreClient first("127.0.0.1", server.port(), {"test-run", 2, 1, ""}, 2s);
  const std::string twice = what_of([&] { StoreClient("127.0.0.1", server.port(), {"test-run", 2, 1, ""}, 2s); });
  EXPECT_TRUE(contains(twice, "RANK=1 connected twice")) << twice;
  EXPECT_EQ(server.wait_for_ranks(Deadline::after(0ms)), std::vector<int>{1});
}

TEST(Group, ALostRankIsAnErrorNamingItAndTheStepNotAHang) {
  StoreServer server(0, "test-run", 2);
  auto rank0 = std::make_unique<StoreClient>("127.0.0.1", server.port(), Greeting{"test-run", 2, 0, ""}, 2s);
  Group group(nullptr, std::move(rank0), 0, {0, 1}, "test");
  const std::string error = what_of([&] { group.gather("results", "mine", Deadline::after(300ms)); });
  EXPECT_TRUE(contains(error, "waiting for rank 1 at step 'results': timed out")) << error;
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
  for (int r = 0; r < 6; ++r)
    peers[static_cast<size_t>(r)] = {r, "n" + std::to_string(r / 2), r % 2 == 0, "10.0.0.1", true};
  peers[4].data_address.clear();  // its interface failed its check
  const auto pairs = ring_pairs(peers);
  ASSERT_EQ(pairs.size(), 2u);
  EXPECT_EQ(pairs[0].first.rank, 0);
  EXPECT_EQ(pairs[0].second.rank, 2);
  EXPECT_EQ(pairs[1].first.rank, 2);
  EXPECT_EQ(pairs[1].second.rank, 0);
  EXPECT_TRUE(ring_pairs({peers[0], peers[1]}).empty());
}

std::vector<std::vector<CheckResult>> link_run(int world_size, std::chrono::milliseconds per_pair,
                                               const std::function<bool(int rank)>& takes_part) {
  std::vector<std::vector<CheckResult>> results(static_cast<size_t>(world_size));
  run_ranks(world_size, [&](Group& g) {
    const Peer me{g.rank(), "host" + std::to_string(g.rank()), true, "127.0.0.1", false};
    const auto peers = exchange_peers(g, me, Deadline::after(5s));
    if (!takes_part(g.rank())) {
      g.barrier("links", Deadline::after(10s));  // as if its Gloo listener were behind a firewall
      return;
    }
    const LinkSettings settings{{4u << 20, 2000ms, 5}, 0.001, 1e6, per_pair, nullptr};
    results[static_cast<size_t>(g.rank())] = check_links(g, peers, settings, 5s);
  });
  return results;
}

TEST(LinkTest, EachLeaderMeasuresTheLinkToTheNextOverGloo) {
  const auto results = link_run(3, 5s, [](int) { return true; });
  for (int rank = 0; rank < 3; ++rank) {
    const auto& mine = results[static_cast<size_t>(rank)];
    ASSERT_EQ(mine.size(), 2u) << rank;  // bandwidth and round trip of its own pair
    EXPECT_EQ(mine[0].check, "net.p2p_bw");
    EXPECT_EQ(mine[0].status, Status::Ok) << mine[0].detail;
    EXPECT_EQ(mine[0].rank, rank);
    EXPECT_EQ(mine[0].host, "host" + std::to_string(rank));
    EXPECT_TRUE(contains(mine[0].value, "to rank " + std::to_string((rank + 1) % 3))) << mine[0].value;
    EXPECT_EQ(mine[0].detail.rfind("4 MiB in ", 0), 0u) << mine[0].detail;
    EXPECT_EQ(mine[1].check, "net.p2p_rtt");
  }
}

TEST(LinkTest, AServerThatNeverAnswersIsAFailWithItsAddress) {
  const auto results = link_run(2, 1s, [](int rank) { return rank != 1; });
  ASSERT_EQ(results[0].size(), 1u);
  EXPECT_EQ(results[0][0].rank, 0);
  EXPECT_EQ(results[0][0].status, Status::Fail);
  EXPECT_TRUE(contains(results[0][0].detail, "cannot test the link to rank 1 (host1) at 127.0.0.1: "))
      << results[0][0].detail;
}

TEST(SharedDir, TokensOfOtherNodesMustBeReadable) {
  TempDir shared;
  TempDir elsewhere;
  const std::string nonce = new_nonce();
  ASSERT_TRUE(valid_nonce(nonce));
  write_token(shared.path(), nonce, 0);
  write_token(shared.path(), nonce, 1);
  write_token(elsewhere.path(), nonce, 2);
  testing::write_file(token_path(shared.path(), nonce, 3), "ddp-doctor run OLD rank 3\n");  // a stale file
  EXPECT_EQ(missing_tokens(shared.path(), nonce, {0, 1, 2, 3}, 0ms), (std::vector<int>{2, 3}));
  std::vector<Peer> others{{2, "node3", true, "", true}};
  const CheckResult result = grade_shared(shared.path(), {2}, others);
  EXPECT_EQ(result.status, Status::Fail);
  EXPECT_EQ(result.value, "0 of 1 other node(s)");
  EXPECT_TRUE(contains(result.detail, "files written by rank 2 (node3) do not appear in"));
  EXPECT_EQ(grade_shared(shared.path(), {}, others).status, Status::Ok);
}

std::vector<CheckResult> shared_dir_run(const std::vector<std::string>& dirs) {
  std::vector<CheckResult> all(dirs.size());
  run_ranks(static_cast<int>(dirs.size()), [&](Group& g) {
    const Peer me{g.rank(), "host" + std::to_string(g.rank()), true, "", true};
    const auto peers = exchange_peers(g, me, Deadline::after(5s));
    const auto mine = check_shared_dir(g, peers, dirs[static_cast<size_t>(g.rank())], Deadline::after(10s));
    ASSERT_EQ(mine.size(), 1u);
    all[static_cast<size_t>(g.rank())] = mine[0];
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

TEST(Clock, ARankSharingRankZerosClockIsNearZero) {
  run_ranks(2, [](Group& g) {
    if (g.rank() == 0) return;
    const ClockOffset offset = offset_from_rank0(*g.store(), 4, Deadline::after(5s));
    EXPECT_LE(std::llabs(offset.offset_ns), offset.error_ns + 1'000'000);  // one clock: only the error remains
    EXPECT_EQ(grade_clock_offset(offset, 100, 300).status, Status::Ok);
  });
}

TEST(GlooAllreduce, SumsAreRightOnEveryRankAtEverySize) {
  const std::vector<AllreduceSize> sizes{{4u << 10, 2}, {256u << 10, 2}};
  std::vector<CheckResult> at_rank0;
  run_ranks(3, [&](Group& g) {
    const auto gloo = make_gloo_backend();
    CollectiveSetup setup;
    setup.data_address = "127.0.0.1";
    setup.timeout = 10000ms;
    const auto results = check_allreduce(g, *gloo, setup, sizes, nullptr);
    if (g.rank() == 0) at_rank0 = results;
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
  run_ranks(2, [&](Group& g) {
    const auto gloo = make_gloo_backend();
    CollectiveSetup setup;
    setup.data_address = g.rank() == 1 ? "" : "127.0.0.1";
    setup.timeout = 2000ms;
    const auto results = check_allreduce(g, *gloo, setup, {{4u << 10, 1}}, nullptr);
    if (g.rank() == 0) at_rank0 = results;
  });
  ASSERT_EQ(at_rank0.size(), 1u);
  EXPECT_EQ(at_rank0[0].status, Status::Fail);
  EXPECT_TRUE(contains(at_rank0[0].detail, "rank 1: no usable address on this rank's interface")) << at_rank0[0].detail;
}

}  // namespace
}  // namespace ddp::doctor
