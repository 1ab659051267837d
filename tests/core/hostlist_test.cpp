#include "base/hostlist.hpp"

#include <gtest/gtest.h>

#include "core/error.hpp"

namespace ddp {
namespace {

std::vector<std::string> expand(const std::string& expression) { return Hostlist::parse(expression).expand(); }

TEST(Hostlist, PlainNamesAndRanges) {
  EXPECT_EQ(expand("node1"), (std::vector<std::string>{"node1"}));
  EXPECT_EQ(expand("node[1-3],login"), (std::vector<std::string>{"node1", "node2", "node3", "login"}));
  EXPECT_EQ(expand("gpu[7,2-3]"), (std::vector<std::string>{"gpu7", "gpu2", "gpu3"}));
}

TEST(Hostlist, KeepsZeroPaddingOfTheLowerBound) {
  EXPECT_EQ(expand("n[08-11]"), (std::vector<std::string>{"n08", "n09", "n10", "n11"}));
  EXPECT_EQ(expand("n[008-9]"), (std::vector<std::string>{"n008", "n009"}));
  EXPECT_EQ(expand("n[8-10]"), (std::vector<std::string>{"n8", "n9", "n10"}));
}

TEST(Hostlist, SeveralBracketsExpandLastFastest) {
  EXPECT_EQ(expand("rack[1-2]-n[1-2].ib"),
            (std::vector<std::string>{"rack1-n1.ib", "rack1-n2.ib", "rack2-n1.ib", "rack2-n2.ib"}));
}

TEST(Hostlist, SizeAndIndexWithoutExpanding) {
  const Hostlist list = Hostlist::parse("a[0-99999],b[1-2]");
  EXPECT_EQ(list.size(), 100002u);
  EXPECT_EQ(list.at(0), "a0");
  EXPECT_EQ(list.at(99999), "a99999");
  EXPECT_EQ(list.at(100001), "b2");
  EXPECT_THROW(list.at(100002), Error);
}

TEST(Hostlist, RejectsMalformedListsNamingThem) {
  for (const char* bad : {"", "node[1-", "node1-]", "n[[1]]", "n[]", "n[3-1]", "n[a-b]", "n[1-2", "a,,b", ",a", "a,",
                          "n[1--2]", "n[-1]", "bad host", "n[1-2]x[", "n[1,]", "n[99999999999999-1]"}) {
    try {
      Hostlist::parse(bad);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("bad node list '" + std::string(bad) + "'"), std::string::npos) << message;
      EXPECT_EQ(message.find('\n'), std::string::npos);
    }
  }
}

TEST(Hostlist, BoundsTheNumberOfHosts) {
  EXPECT_THROW(Hostlist::parse("n[1-2000000]"), Error);
  EXPECT_THROW(Hostlist::parse("n[1-1000]x[1-1000]y[1-1000]"), Error);
  EXPECT_EQ(Hostlist::parse("n[1-1000]x[1-1000]").size(), 1'000'000u);
}

}  // namespace
}  // namespace ddp
