#include "ports.hpp"

#include <gtest/gtest.h>

#include <set>

#include "error.hpp"

namespace ddp {
namespace {

const PortRange kRange{20000, 29999};

TEST(Ports, UserPortWinsThenReservedThenHash) {
  EXPECT_EQ(choose_master_port(23456, "12000-12001", 7, 0, kRange).source, PortSource::User);
  const PortChoice reserved = choose_master_port(std::nullopt, "12000-12001", 7, 0, kRange);
  EXPECT_EQ(reserved.port, 12000);
  EXPECT_EQ(reserved.source, PortSource::Reserved);
  EXPECT_EQ(choose_master_port(std::nullopt, "12005,12009", 7, 0, kRange).port, 12005);
  const PortChoice hashed = choose_master_port(std::nullopt, "", 7, 0, kRange);
  EXPECT_EQ(hashed.source, PortSource::Hashed);
  EXPECT_TRUE(kRange.contains(hashed.port));
}

TEST(Ports, RejectsGarbageInReservedPorts) {
  EXPECT_THROW(choose_master_port(std::nullopt, "abc", 7, 0, kRange), Error);
  EXPECT_THROW(choose_master_port(std::nullopt, "0-3", 7, 0, kRange), Error);
}

TEST(Ports, ConcurrentStepsOfOneJobNeverShareAPort) {
  std::set<uint16_t> ports;
  for (uint32_t step = 0; step < kStepsPerJob; ++step) ports.insert(hashed_port(4242, step, kRange));
  EXPECT_EQ(ports.size(), kStepsPerJob);
}

TEST(Ports, NearbyJobsNeverShareAPort) {
  // Jobs running together on a node have nearby ids: every pair within range/kStepsPerJob differs.
  const uint32_t window = kRange.size() / kStepsPerJob;
  std::set<uint16_t> ports;
  for (uint32_t job = 1000; job < 1000 + window; ++job) {
    for (uint32_t step = 0; step < 4; ++step) ports.insert(hashed_port(job, step, kRange));
  }
  EXPECT_EQ(ports.size(), window * 4);
  for (uint16_t port : ports) EXPECT_TRUE(kRange.contains(port));
}

TEST(Ports, TinyRangesStillStayInside) {
  const PortRange tiny{25000, 25002};
  for (uint32_t job = 0; job < 50; ++job) {
    for (uint32_t step = 0; step < 20; ++step) EXPECT_TRUE(tiny.contains(hashed_port(job, step, tiny)));
  }
}

TEST(Ports, EphemeralRangeFromProc) {
  const PortRange range = parse_ephemeral_range("32768\t60999\n");
  EXPECT_EQ(range.first, 32768);
  EXPECT_EQ(range.last, 60999);
  EXPECT_THROW(parse_ephemeral_range("garbage"), Error);
  EXPECT_TRUE(read_ephemeral_range().size() > 0);
  EXPECT_TRUE(kRange.overlaps({29999, 40000}));
  EXPECT_FALSE(kRange.overlaps({32768, 60999}));
}

}  // namespace
}  // namespace ddp
