#include "doctor/run/report.hpp"

#include <gtest/gtest.h>

#include <algorithm>

#include <sstream>

#include "doctor/run/wire.hpp"
#include "test_support.hpp"

namespace ddp::doctor {
namespace {

using testing::contains;

CheckResult row(const std::string& host, int rank, const CheckInfo& check, Status status, const std::string& value,
                const std::string& threshold, const std::string& detail) {
  CheckResult r = make_result(check, status, value, threshold, detail);
  r.host = host;
  r.rank = rank;
  return r;
}

Report sample() {
  Report report;
  report.launcher = "tcp 10.0.0.1:29500";
  report.world_size = 2;
  report.results = {
      make_result(checks::kAllreduceGloo, Status::Ok, "busbw 1.00 GB/s @ 1 MiB", "sum correct"),
      row("node2", 1, checks::kLinkBandwidth, Status::Warn, "1.00 Gbit/s to rank 0 (node1)", ">= 10 Gbit/s", "slow"),
      row("node1", 0, checks::kStorageShared, Status::Fail, "0 of 1 other node(s)", "all nodes' tokens",
          "not \"shared\""),
      row("node1", 0, checks::kGpuDriver, Status::Skip, "-", "", "no GPU"),
  };
  return report;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(Report, TableOrdersByRankWithWholeRunRowsLastAndAlignsColumns) {
  const auto lines = lines_of(format_table(sample()));
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_EQ(lines[0].rfind("HOST", 0), 0u);
  // Rank 0's rows keep their order, then rank 1, then the run-wide row.
  EXPECT_TRUE(contains(lines[1], "storage.shared") && contains(lines[1], "FAIL"));
  EXPECT_TRUE(contains(lines[2], "gpu.driver") && contains(lines[2], "SKIP"));
  EXPECT_TRUE(contains(lines[3], "node2") && contains(lines[3], "WARN"));
  EXPECT_EQ(lines[4].rfind("(all)", 0), 0u);
  // Every row's CHECK column starts where the header's does; an empty threshold prints as "-".
  const size_t check_column = lines[0].find("CHECK");
  for (const auto& line : lines) EXPECT_NE(line.substr(check_column, 5), "     ") << line;
  EXPECT_EQ(lines[3].find("net.p2p_bw"), check_column);
  const size_t threshold_column = lines[0].find("THRESHOLD");
  EXPECT_EQ(lines[2].substr(threshold_column, 2), "- ");
  EXPECT_EQ(lines[2].substr(lines[0].find("DETAIL")), "no GPU");
  for (const auto& line : lines) EXPECT_NE(line.back(), ' ');
}

TEST(Report, SummaryCountsStatusesNodesAndRanks) {
  EXPECT_EQ(format_summary(sample()),
            "ddp-doctor: 2 node(s), 2 rank(s) via tcp 10.0.0.1:29500: 1 OK, 1 WARN, 1 FAIL, 1 SKIP");
}

TEST(Report, JsonCarriesEveryFieldEscaped) {
  const std::string json = format_json(sample());
  EXPECT_EQ(json.rfind("{\"ok\":false,\"launcher\":\"tcp 10.0.0.1:29500\",\"world_size\":2,\"nodes\":2,", 0), 0u);
  EXPECT_TRUE(contains(json, "\"counts\":{\"OK\":1,\"WARN\":1,\"FAIL\":1,\"SKIP\":1}"));
  EXPECT_TRUE(contains(json,
                       "{\"host\":\"node1\",\"rank\":0,\"check\":\"storage.shared\",\"status\":\"FAIL\","
                       "\"value\":\"0 of 1 other node(s)\",\"threshold\":\"all nodes' tokens\","
                       "\"detail\":\"not \\\"shared\\\"\"}"));
  EXPECT_TRUE(contains(json, "{\"host\":null,\"rank\":null,\"check\":\"allreduce.gloo\""));
  EXPECT_EQ(json.back(), '\n');
}

// Peer strings were printed raw, so a peer could send terminal escapes to rank 0's terminal.
TEST(Report, TableShowsControlCharactersOfPeersAsText) {
  Report report;
  CheckResult row = make_result(checks::kRendezvous, Status::Ok, "up\x1b]0;owned\x07", "", "line\nbreak");
  row.host = "node\x1b[2J";
  row.rank = 1;
  report.results = {row};
  const std::string table = format_table(report);
  EXPECT_EQ(table.find('\x1b'), std::string::npos) << table;
  EXPECT_NE(table.find("node?[2J"), std::string::npos) << table;
  EXPECT_NE(table.find("up?]0;owned?"), std::string::npos) << table;
  EXPECT_NE(table.find("line?break"), std::string::npos) << table;
  EXPECT_EQ(std::count(table.begin(), table.end(), '\n'), 2) << table;
}

TEST(Report, ExitStatusFailsOnlyOnFail) {
  EXPECT_EQ(exit_status({make_result(checks::kCpuCores, Status::Ok, ""),
                         make_result(checks::kOmpThreads, Status::Warn, ""), skipped(checks::kGpuVisible, "")}),
            0);
  EXPECT_EQ(
      exit_status({make_result(checks::kCpuCores, Status::Ok, ""), make_result(checks::kOmpThreads, Status::Fail, "")}),
      1);
  EXPECT_EQ(exit_status({}), 0);
}

TEST(Wire, ResultsSurviveTheTripBetweenRanks) {
  auto results = sample().results;
  const auto decoded = decode_results(encode_results(results));
  ASSERT_EQ(decoded.size(), results.size());
  for (size_t i = 0; i < results.size(); ++i) {
    EXPECT_EQ(decoded[i].check, results[i].check);
    EXPECT_EQ(decoded[i].status, results[i].status);
    EXPECT_EQ(decoded[i].value, results[i].value);
    EXPECT_EQ(decoded[i].threshold, results[i].threshold);
    EXPECT_EQ(decoded[i].detail, results[i].detail);
    EXPECT_EQ(decoded[i].host, results[i].host);
    EXPECT_EQ(decoded[i].rank, results[i].rank);
  }
}

// Lengths carry any byte; what another rank sent arrives as printable text (store_test.cpp has the attacks).
TEST(Wire, BinaryFieldsArriveIntactInLengthAndPrintable) {
  auto results = sample().results;
  results[1].detail = std::string("binary\0and\nnewline", 18);
  EXPECT_EQ(decode_results(encode_results(results))[1].detail, "binary?and?newline");
}

TEST(Wire, TruncatedOrForeignMessagesAreErrorsNotCrashes) {
  const std::string bytes = encode_results(sample().results);
  EXPECT_THROW(decode_results(bytes.substr(0, bytes.size() - 3)), ExchangeError);
  EXPECT_THROW(decode_results("GET / HTTP/1.1\r\n\r\n"), ExchangeError);
  WireReader reader(WireWriter().put("x").bytes());
  EXPECT_EQ(reader.get(), "x");
  EXPECT_TRUE(reader.done());
  EXPECT_THROW(reader.get(), ExchangeError);
}

}  // namespace
}  // namespace ddp::doctor
