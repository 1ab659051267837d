// The link check between node leaders (links.hpp), with ranks as threads of this process on 127.0.0.1.
#include <gtest/gtest.h>

#include <chrono>

#include "doctor/run/group.hpp"
#include "doctor/run/links.hpp"
#include "ranks.hpp"

namespace ddp::doctor {
namespace {

using namespace std::chrono_literals;
using testing::contains;
using testing::error_of;
using testing::run_ranks;

TEST(Links, GradesAgainstTheGuidesMinimum) {
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

TEST(Links, RingOfNodeLeadersThatCanServe) {
  std::vector<Peer> peers(6);
  for (int r = 0; r < 6; ++r)
    peers[static_cast<size_t>(r)] = {r, "n" + std::to_string(r / 2), r % 2 == 0, "10.0.0.1", true, {}};
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
    const Peer me{g.rank(), "host" + std::to_string(g.rank()), true, "127.0.0.1", false, {}};
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

TEST(Links, EachLeaderMeasuresTheLinkToTheNextOverGloo) {
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

TEST(Links, AServerThatNeverAnswersIsAFailWithItsAddress) {
  const auto results = link_run(2, 1s, [](int rank) { return rank != 1; });
  ASSERT_EQ(results[0].size(), 1u);
  EXPECT_EQ(results[0][0].rank, 0);
  EXPECT_EQ(results[0][0].status, Status::Fail);
  EXPECT_TRUE(contains(results[0][0].detail, "cannot test the link to rank 1 (host1) at 127.0.0.1: "))
      << results[0][0].detail;
}

}  // namespace
}  // namespace ddp::doctor
