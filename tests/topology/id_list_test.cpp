#include "topology/id_list.hpp"

#include <gtest/gtest.h>

#include "core/error.hpp"

namespace ddp {
namespace {

using Ids = std::vector<unsigned>;

TEST(IdList, ParsesSlurmCoreListsLikeStepAllocCores) {
  EXPECT_EQ(parse_id_list("0-3,8", "S_STEP_ALLOC_CORES"), (Ids{0, 1, 2, 3, 8}));
  EXPECT_EQ(parse_id_list("7", "S_STEP_ALLOC_CORES"), (Ids{7}));
  EXPECT_EQ(parse_id_list("24-26,0-1", "S_STEP_ALLOC_CORES"), (Ids{0, 1, 24, 25, 26}));
}

TEST(IdList, MergesOverlappingRangesIntoOneSortedSet) {
  EXPECT_EQ(parse_id_list("2-5,0-3,4", "x"), (Ids{0, 1, 2, 3, 4, 5}));
}

TEST(IdList, WideRepeatedRangesStayBounded) {
  std::string text = "0-65535";
  for (int i = 0; i < 2000; ++i) text += ",0-65535";
  EXPECT_EQ(parse_id_list(text, "x").size(), 65536u);
}

TEST(IdList, RejectsMalformedListsNamingTheValue) {
  for (const char* bad : {"", "a", "1-", "-1", "1,,2", "1 ,2", ",1", "1,", "3-1", "0x1", "65536", "0-4000000000"}) {
    try {
      parse_id_list(bad, "S_STEP_ALLOC_CORES");
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& error) {
      const std::string message = error.what();
      EXPECT_NE(message.find("S_STEP_ALLOC_CORES '" + std::string(bad) + "'"), std::string::npos) << message;
      EXPECT_NE(message.find("like '0-3,8'"), std::string::npos) << message;
      EXPECT_EQ(message.find('\n'), std::string::npos);
    }
  }
}

TEST(IdList, FormatsTheShortestListAndRoundTrips) {
  EXPECT_EQ(format_id_list({0, 1, 2, 3, 8}), "0-3,8");
  EXPECT_EQ(format_id_list({5}), "5");
  EXPECT_EQ(format_id_list({1, 3}), "1,3");
  EXPECT_EQ(format_id_list({}), "");
  const std::string list = "0-5,48-53,60";
  EXPECT_EQ(format_id_list(parse_id_list(list, "x")), list);
}

}  // namespace
}  // namespace ddp
