// The project's one HMAC (base/hmac.hpp): nettle's HMAC-SHA-256, loaded at run time, against RFC 4231's vectors.
#include <gtest/gtest.h>

#include <string>

#include "base/hmac.hpp"

namespace ddp {
namespace {

// RFC 4231's test cases 1, 2 and 6: a short key, a key shorter than the data, a key longer than a block.
TEST(Hmac, Sha256MatchesRfc4231) {
  EXPECT_EQ(hmac_sha256_hex(std::string(20, '\x0b'), "Hi There"),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  EXPECT_EQ(hmac_sha256_hex("Jefe", "what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  EXPECT_EQ(hmac_sha256_hex(std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First"),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  EXPECT_EQ(hmac_sha256_hex("Jefe", "").size(), kHmacHexDigits);
}

// A MAC over a large state is taken in parts, without a copy of the whole: the same as in one piece, and the
// context starts again with its key after each MAC.
TEST(Hmac, PartsGiveTheMacOfTheWholeAndEachMacStartsAgain) {
  const std::string whole = "what do ya want for nothing?";
  HmacSha256 mac("Jefe");
  EXPECT_EQ(mac.update(whole.substr(0, 7)).update(whole.data() + 7, whole.size() - 7).hex(),
            hmac_sha256_hex("Jefe", whole));
  EXPECT_EQ(mac.update(whole).hex(), hmac_sha256_hex("Jefe", whole));
}

TEST(Hmac, SameMacComparesEveryCharacter) {
  EXPECT_TRUE(same_mac("abcd", "abcd"));
  EXPECT_FALSE(same_mac("abcd", "abce"));
  EXPECT_FALSE(same_mac("abcd", "abc"));
  EXPECT_FALSE(same_mac("", "a"));
}

}  // namespace
}  // namespace ddp
