// The catalogue of checks (catalogue.hpp): names that scripts can rely on, each entry complete, every threshold
// option one that ddp-doctor takes, the table --list-checks prints and docs/doctor-checks.md holds, and a result
// refused outside its entry's place. That every check a run reports is in the catalogue is checked on the reports
// of the CLI tests (lib.sh's check_report).
#include "doctor/checks/catalogue.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>

#include "doctor/run/doctor_options.hpp"
#include "test_support.hpp"

namespace ddp::doctor {
namespace {

using testing::contains;
using testing::error_of;

TEST(Catalogue, NamesAreUniqueDottedAndLowerCase) {
  std::set<std::string> names;
  const std::regex dotted("[a-z][a-z0-9_]*(\\.[a-z0-9_]+)?");
  for (const CheckInfo* entry : catalogue()) {
    EXPECT_TRUE(names.insert(entry->name).second) << entry->name << " twice";
    EXPECT_TRUE(std::regex_match(entry->name, dotted)) << entry->name;
    EXPECT_STRNE(entry->what, "") << entry->name;
    EXPECT_STRNE(to_string(entry->where), "?") << entry->name;
  }
  EXPECT_GE(names.size(), 30u);
}

TEST(Catalogue, EveryThresholdOptionIsOneDdpDoctorTakesAndItsHelpLists) {
  const std::string help = doctor_usage(DoctorOptions{}, 1);
  for (const CheckInfo* entry : catalogue()) {
    const std::string option = entry->threshold_option;
    if (option.empty()) continue;
    EXPECT_EQ(error_of([&] { parse_doctor_options({option + "=1"}); }), "") << entry->name << ": " << option;
    EXPECT_TRUE(contains(help, "  " + option + " ")) << option;
  }
}

TEST(Catalogue, FindsEntriesByTheirNameOnly) {
  ASSERT_NE(find_check("net.interface"), nullptr);
  EXPECT_EQ(find_check("net.interface"), &checks::kInterface);
  EXPECT_EQ(find_check("allreduce.nccl"), &checks::kAllreduceNccl);
  EXPECT_EQ(find_check("net"), nullptr);
  EXPECT_EQ(find_check(""), nullptr);
}

TEST(Catalogue, ResultsCarryTheEntrysName) {
  EXPECT_EQ(make_result(checks::kStorageFree, Status::Warn, "1 GiB free").check, "storage.free");
  EXPECT_EQ(skipped(checks::kAllreduceGloo, "one rank").check, "allreduce.gloo");
}

TEST(Catalogue, ListChecksPrintsAHeaderThenOneLinePerCheck) {
  std::istringstream text(catalogue_text());
  std::string line;
  std::getline(text, line);
  EXPECT_EQ(line.rfind("check ", 0), 0u) << line;
  for (const CheckInfo* entry : catalogue()) {
    ASSERT_TRUE(std::getline(text, line)) << entry->name;
    std::istringstream words(line);
    std::string name;
    words >> name;
    EXPECT_EQ(name, entry->name);
    EXPECT_TRUE(contains(line, to_string(entry->where))) << line;
    EXPECT_TRUE(contains(line, entry->what)) << line;
    EXPECT_TRUE(contains(line, *entry->threshold_option ? entry->threshold_option : " - ")) << line;
  }
  EXPECT_FALSE(std::getline(text, line)) << line;
}

TEST(Catalogue, TheDocsPageHoldsTheTableListChecksPrints) {
  const std::string page = std::string(PROJECT_SOURCE_DIR) + "/docs/doctor-checks.md";
  std::vector<std::string> expected;
  std::istringstream text(catalogue_text());
  for (std::string line; std::getline(text, line);) expected.push_back(line);
  std::set<std::string> documented;
  std::ifstream in(page);
  for (std::string line; std::getline(in, line);) documented.insert(line.substr(0, line.find(' ')));
  for (const CheckInfo* entry : catalogue()) {
    if (documented.count(entry->name) == 0) ADD_FAILURE() << page << " has no row for check " << entry->name;
  }
  const std::string differs = ddp::testing::compare_block(page, "```text", "", expected, "```");
  EXPECT_TRUE(differs.empty()) << differs;
}

TEST(Catalogue, AResultMadeOutsideItsEntrysPlaceIsRefused) {
  std::vector<CheckResult> node{make_result(checks::kInterface, Status::Ok, "eth0")};
  EXPECT_EQ(&ran_at({Where::Node}, node), &node);
  EXPECT_EQ(&ran_at({Where::Node, Where::NodeLeader}, node), &node);
  EXPECT_EQ(error_of<std::logic_error>([&] { ran_at({Where::RankZero}, node); }),
            "check net.interface is declared for node but ran at rank 0; run it from its place or change its row's "
            "where in catalogue.hpp");
  std::vector<CheckResult> unknown{make_result(checks::kInterface, Status::Ok, "eth0")};
  unknown[0].check = "net.made_up";
  EXPECT_EQ(error_of<std::logic_error>([&] { ran_at({Where::Node}, unknown); }),
            "check net.made_up is not in catalogue.hpp; add its row");
}

TEST(Catalogue, RowsAreGroupedByPlaceInTheOrderOfWhere) {
  Where last = Where::Node;
  for (const CheckInfo* entry : catalogue()) {
    EXPECT_GE(static_cast<int>(entry->where), static_cast<int>(last)) << entry->name << ": move its row to its place";
    last = entry->where;
  }
}

}  // namespace
}  // namespace ddp::doctor
