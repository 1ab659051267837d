// The clock offset check against rank 0 (clock.hpp), with ranks as threads of this process on 127.0.0.1.
#include <gtest/gtest.h>

#include <chrono>

#include "doctor/run/clock.hpp"
#include "doctor/run/group.hpp"
#include "ranks.hpp"

namespace ddp::doctor {
namespace {

using namespace std::chrono_literals;
using testing::run_ranks;

TEST(Clock, ARankSharingRankZerosClockIsNearZero) {
  run_ranks(2, [](Group& g) {
    if (g.rank() == 0) return;
    const ClockOffset offset = offset_from_rank0(*g.store(), 4, Deadline::after(5s));
    EXPECT_LE(std::llabs(offset.offset_ns), offset.error_ns + 1'000'000);  // one clock: only the error remains
    EXPECT_EQ(grade_clock_offset(offset, 100, 300).status, Status::Ok);
  });
}

}  // namespace
}  // namespace ddp::doctor
