// The ranks' store and group, with ranks as threads of this process on 127.0.0.1. Attacks on the store and its
// messages are in store_test.cpp.
#include <gtest/gtest.h>

#include <chrono>

#include "doctor/run/group.hpp"
#include "ranks.hpp"

namespace ddp::doctor {
namespace {

using namespace std::chrono_literals;
using testing::budget_of;
using testing::contains;
using testing::error_of;
using testing::launch_of;
using testing::on_threads;
using testing::RefusingPort;
using testing::run_ranks;

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
  const std::string error = error_of([&] { meet(launch_of(1, 2, nobody.port), budget_of(300ms), nullptr); });
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
  const std::string other_size = error_of([&] { StoreClient("127.0.0.1", server.port(), {"test-run", 5, 1, ""}, 2s); });
  EXPECT_TRUE(contains(other_size, "refused rank 1: it says WORLD_SIZE=5, rank 0 has WORLD_SIZE=2")) << other_size;
  const std::string other_run = error_of([&] { StoreClient("127.0.0.1", server.port(), {"7.0", 2, 1, ""}, 2s); });
  EXPECT_TRUE(contains(other_run, "it belongs to run 7.0, this is run test-run")) << other_run;
  StoreClient first("127.0.0.1", server.port(), {"test-run", 2, 1, ""}, 2s);
  const std::string twice = error_of([&] { StoreClient("127.0.0.1", server.port(), {"test-run", 2, 1, ""}, 2s); });
  EXPECT_TRUE(contains(twice, "RANK=1 connected twice")) << twice;
  EXPECT_EQ(server.wait_for_ranks(Deadline::after(0ms)), std::vector<int>{1});
}

TEST(Group, ALostRankIsAnErrorNamingItAndTheStepNotAHang) {
  StoreServer server(0, "test-run", 2);
  auto rank0 = std::make_unique<StoreClient>("127.0.0.1", server.port(), Greeting{"test-run", 2, 0, ""}, 2s);
  Group group(nullptr, std::move(rank0), 0, {0, 1}, "test");
  const std::string error = error_of([&] { group.gather("results", "mine", Deadline::after(300ms)); });
  EXPECT_TRUE(contains(error, "waiting for rank 1 at step 'results': timed out")) << error;
}

}  // namespace
}  // namespace ddp::doctor
