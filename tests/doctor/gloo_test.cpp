// The Gloo all-reduce check (gloo.hpp), with ranks as threads of this process on 127.0.0.1.
#include <gtest/gtest.h>

#include <chrono>

#include "doctor/run/gloo.hpp"
#include "doctor/run/group.hpp"
#include "ranks.hpp"

namespace ddp::doctor {
namespace {

using namespace std::chrono_literals;
using testing::contains;
using testing::error_of;
using testing::run_ranks;

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
