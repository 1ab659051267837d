#include "base/json_string.hpp"

#include <gtest/gtest.h>

namespace ddp {
namespace {

TEST(JsonString, QuotesAndEscapes) {
  EXPECT_EQ(json_string("a\"b\\c\nd\te\x01"), "\"a\\\"b\\\\c\\nd\\te\\u0001\"");
  EXPECT_EQ(json_string(""), "\"\"");
}

TEST(JsonString, KeepsUtf8AndReplacesInvalidBytes) {
  EXPECT_EQ(json_string("gr\xc3\xbc\xc3\x9f"), "\"gr\xc3\xbc\xc3\x9f\"");
  // A cut multi-byte sequence (a host name cut short, a traceback cut at a limit) still gives valid JSON.
  EXPECT_EQ(json_string("ab\xc3"), "\"ab\xef\xbf\xbd\"");
}

}  // namespace
}  // namespace ddp
