#include "spank_plugin/step/ports.hpp"
#include "core/redact.hpp"

#include <gtest/gtest.h>

#include <set>

#include "base/parse.hpp"
#include "core/error.hpp"

namespace ddp {
namespace {

const PortRange kRange{20000, 29999};

TEST(Ports, UserPortWinsThenReservedThenHash) {
  EXPECT_EQ(choose_master_port(23456, "12000-12001", 7, 0, kRange).source, PortSource::User);
  const MasterPort reserved = choose_master_port(std::nullopt, "12000-12001", 7, 0, kRange);
  EXPECT_EQ(reserved.number, 12000);
  EXPECT_EQ(reserved.source, PortSource::Reserved);
  EXPECT_EQ(choose_master_port(std::nullopt, "12005,12009", 7, 0, kRange).number, 12005);
  const MasterPort hashed = choose_master_port(std::nullopt, "", 7, 0, kRange);
  EXPECT_EQ(hashed.source, PortSource::Hashed);
  EXPECT_TRUE(kRange.contains(hashed.number));
}

TEST(Ports, RejectsGarbageInReservedPorts) {
  EXPECT_THROW(choose_master_port(std::nullopt, "abc", 7, 0, kRange), Error);
  EXPECT_THROW(choose_master_port(std::nullopt, "0-3", 7, 0, kRange), Error);
  for (const char* bad : {"", ",", "12000,", "12000-", "-12000", "12003-12000", "12005,12001", "12000-12003,12002",
                          "70000", "12000 ", "1e4", "12000--12001"}) {
    EXPECT_THROW(parse_reserved_ports(bad), Error) << bad;
  }
}

TEST(Ports, ReadsSlurmsReservedPortLists) {
  const std::vector<PortRange> ranges = parse_reserved_ports("12000-12003,12007,12010-12011");
  ASSERT_EQ(ranges.size(), 3u);
  EXPECT_EQ(ranges[1].first, 12007);
  EXPECT_EQ(ranges[1].last, 12007);
  EXPECT_EQ(ranges[2].last, 12011);
  try {
    parse_reserved_ports("12005,12001");
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "SLURM_STEP_RESV_PORTS (set by Slurm's MpiParams=ports) '12005,12001' is not an "
              "ascending list of ports and FIRST-LAST ranges");
  }
}

TEST(Ports, JobKeysAreRandomHex) {
  const std::string key = new_job_key();
  EXPECT_TRUE(is_job_key(key)) << key;
  EXPECT_NE(key, new_job_key());
  EXPECT_FALSE(is_job_key("0123456789ABCDEF0123456789abcdef"));
  EXPECT_FALSE(is_job_key("0123"));
}

// A job's instance: random, and too short to pass for key material (it appears in file names and messages).
TEST(Ports, JobInstancesAreRandomHexShorterThanKeyMaterial) {
  const std::string instance = new_job_instance();
  EXPECT_TRUE(is_job_instance(instance)) << instance;
  EXPECT_NE(instance, new_job_instance());
  EXPECT_EQ(redact_key_material("r4711-" + instance + ".pt"), "r4711-" + instance + ".pt");
  EXPECT_FALSE(is_job_instance("0A1B2C3D4E5F"));
  EXPECT_FALSE(is_job_instance("0a1b2c3d4e5"));
  EXPECT_FALSE(is_job_instance(new_job_key()));
  EXPECT_FALSE(is_job_instance("0a1b2c3d4e5g"));
}

// Ports without a job key: jobs 1000 and 1625 got the same port (and steps 0 and 16 of a job), and anyone
// could compute it. With the job's key the place in the range is the key's: the job id plays no part, a job's
// steps never share a port, and across jobs the ports spread over the whole range.
TEST(Ports, KeyedPortsFollowTheKeyNotTheJobId) {
  EXPECT_EQ(hashed_port(1000, 0, kRange), hashed_port(1625, 0, kRange)) << "the repetition without a key";
  const std::string key = "0123456789abcdef0123456789abcdef";
  EXPECT_EQ(hashed_port(1000, 0, kRange, key), hashed_port(1625, 0, kRange, key));
  EXPECT_EQ(hashed_port(1000, 0, kRange, key), 20000 + 0x01234567 % 10000);
  std::set<uint16_t> steps;
  for (uint32_t step = 0; step < 1000; ++step) steps.insert(hashed_port(4242, step, kRange, key));
  EXPECT_EQ(steps.size(), 1000u);
  std::set<uint16_t> jobs;
  for (int job = 0; job < 1000; ++job) {
    const uint16_t port = hashed_port(1000, 0, kRange, new_job_key());
    EXPECT_TRUE(kRange.contains(port));
    jobs.insert(port);
  }
  // 1000 keys over 10000 ports: about 952 distinct values; 900 is more than seven standard deviations below.
  EXPECT_GT(jobs.size(), 900u);
  EXPECT_EQ(choose_master_port(std::nullopt, "", 1000, 2, kRange, key).number, hashed_port(1000, 2, kRange, key));
  EXPECT_EQ(choose_master_port(std::nullopt, "", 1000, 2, kRange, "not a key").number, hashed_port(1000, 2, kRange));
}

TEST(Parse, MaximaBelowNineAreKept) {
  EXPECT_EQ(parse_uint("7", 5), std::nullopt);
  EXPECT_EQ(parse_uint("5", 5), 5u);
  EXPECT_EQ(parse_uint("0", 0), 0u);
  EXPECT_EQ(parse_uint("1", 0), std::nullopt);
  EXPECT_EQ(parse_uint("18446744073709551615", UINT64_MAX), UINT64_MAX);
  EXPECT_EQ(parse_uint("18446744073709551616", UINT64_MAX), std::nullopt);
}

TEST(Parse, AnIntegerIsTheWholeTextWithinSixtyFourBits) {
  EXPECT_EQ(parse_int("-12"), -12);
  EXPECT_EQ(parse_int("9223372036854775807"), INT64_MAX);
  EXPECT_EQ(parse_int("-9223372036854775808"), INT64_MIN);
  EXPECT_EQ(parse_int("9223372036854775808"), std::nullopt);
  for (const char* bad : {"", "+1", " 1", "1 ", "1x", "-", "0x10"}) EXPECT_EQ(parse_int(bad), std::nullopt) << bad;
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
