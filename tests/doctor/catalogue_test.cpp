// The catalogue of checks (catalogue.hpp): names that scripts can rely on, each entry complete, every threshold
// option one that ddp-doctor takes, and the table --list-checks prints. That every check a run reports is in the
// catalogue is checked on the reports of the CLI tests (lib.sh's check_report).
#include "doctor/checks/catalogue.hpp"

#include <gtest/gtest.h>

#include <regex>
#include <set>
#include <sstream>

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

}  // namespace
}  // namespace ddp::doctor
