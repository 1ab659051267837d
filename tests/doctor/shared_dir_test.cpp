// The shared-directory check across ranks (shared_dir.hpp), with ranks as threads of this process on 127.0.0.1.
#include <gtest/gtest.h>

#include <chrono>

#include "doctor/run/group.hpp"
#include "doctor/run/shared_dir.hpp"
#include "ranks.hpp"

namespace ddp::doctor {
namespace {

using namespace std::chrono_literals;
using testing::contains;
using testing::run_ranks;
using testing::TempDir;

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
  std::vector<Peer> others{{2, "node3", true, "", true, {}}};
  const CheckResult result = grade_shared(shared.path(), {2}, others);
  EXPECT_EQ(result.status, Status::Fail);
  EXPECT_EQ(result.value, "0 of 1 other node(s)");
  EXPECT_TRUE(contains(result.detail, "files written by rank 2 (node3) do not appear in"));
  EXPECT_EQ(grade_shared(shared.path(), {}, others).status, Status::Ok);
}

// Each rank's rows: storage.shared first, then storage.locks where the rank has one.
std::vector<std::vector<CheckResult>> shared_dir_run(const std::vector<std::string>& dirs) {
  std::vector<std::vector<CheckResult>> all(dirs.size());
  run_ranks(static_cast<int>(dirs.size()), [&](Group& g) {
    const Peer me{g.rank(), "host" + std::to_string(g.rank()), true, "", true, {}};
    const auto peers = exchange_peers(g, me, Deadline::after(5s));
    all[static_cast<size_t>(g.rank())] =
        check_shared_dir(g, peers, dirs[static_cast<size_t>(g.rank())], Deadline::after(10s));
  });
  return all;
}

TEST(SharedDir, SameDirectoryOnEveryRankPassesAndIsLeftClean) {
  TempDir shared;
  const auto results = shared_dir_run({shared.path(), shared.path(), shared.path()});
  for (const auto& mine : results) {
    ASSERT_FALSE(mine.empty());
    EXPECT_EQ(mine[0].check, "storage.shared");
    EXPECT_EQ(mine[0].status, Status::Ok) << mine[0].detail;
    EXPECT_EQ(mine[0].value, "2 of 2 other node(s)");
  }
  EXPECT_TRUE(std::filesystem::is_empty(shared.path()));
}

// Every rank of this process opens rank 0's token on its own: a lock of one open file is refused to another, as
// between nodes whose locks hold across them. Rank 0 holds the lock and has no row.
TEST(SharedDir, RankZerosLockIsRefusedToEveryOtherNode) {
  TempDir shared;
  const auto results = shared_dir_run({shared.path(), shared.path(), shared.path()});
  EXPECT_EQ(results[0].size(), 1u);
  for (const int rank : {1, 2}) {
    const auto& mine = results[static_cast<size_t>(rank)];
    ASSERT_EQ(mine.size(), 2u);
    EXPECT_EQ(mine[1].check, "storage.locks");
    EXPECT_EQ(mine[1].status, Status::Ok) << mine[1].detail;
    EXPECT_EQ(mine[1].value, "refused");
    EXPECT_EQ(mine[1].threshold, "refused while rank 0 (host0) holds it");
    EXPECT_EQ(mine[1].rank, rank);
  }
}

TEST(SharedDir, PrivateDirectoriesFailOnEveryRankAndTheirLocksAreNotTried) {
  TempDir a;
  TempDir b;
  const auto results = shared_dir_run({a.path(), b.path()});
  ASSERT_EQ(results[0].size(), 1u);
  EXPECT_EQ(results[0][0].status, Status::Fail);
  EXPECT_TRUE(contains(results[0][0].detail, "files written by rank 1 (host1)"));
  ASSERT_EQ(results[1].size(), 2u);
  EXPECT_EQ(results[1][0].status, Status::Fail);
  EXPECT_TRUE(contains(results[1][0].detail, "files written by rank 0 (host0)"));
  EXPECT_EQ(results[1][1].check, "storage.locks");
  EXPECT_EQ(results[1][1].status, Status::Skip);
  EXPECT_TRUE(contains(results[1][1].detail, "rank 0's file does not appear here (storage.shared)"));
}

TEST(SharedDir, OneNodeAloneSkipsBothChecks) {
  TempDir shared;
  const auto results = shared_dir_run({shared.path()});
  ASSERT_EQ(results[0].size(), 2u);
  EXPECT_EQ(results[0][0].check, "storage.shared");
  EXPECT_EQ(results[0][0].status, Status::Skip);
  EXPECT_EQ(results[0][1].check, "storage.locks");
  EXPECT_EQ(results[0][1].status, Status::Skip);
}

}  // namespace
}  // namespace ddp::doctor
