#include "base/hmac.hpp"

#include <cstdint>

#include "base/shared_library.hpp"
#include "core/error.hpp"

namespace ddp {
namespace {

constexpr char kNettle[] = "libnettle.so.8";
constexpr std::size_t kDigestBytes = 32;

using SetKey = void (*)(void* context, std::size_t length, const uint8_t* key);
using Update = void (*)(void* context, std::size_t length, const uint8_t* data);
using Digest = void (*)(void* context, std::size_t length, uint8_t* digest);

struct Nettle {
  SetKey set_key = nullptr;
  Update update = nullptr;
  Digest digest = nullptr;
};

// Loaded once per process and kept: the entry points stay valid for every HmacSha256.
const Nettle& nettle() {
  static const Nettle loaded = [] {
    static SharedLibrary library(kNettle);
    Nettle api;
    if (!library.bind("nettle_hmac_sha256_set_key", api.set_key) ||
        !library.bind("nettle_hmac_sha256_update", api.update) ||
        !library.bind("nettle_hmac_sha256_digest", api.digest)) {
      return Nettle{};
    }
    library.keep();
    return api;
  }();
  if (loaded.set_key == nullptr) {
    throw Error(std::string("cannot load nettle's HMAC-SHA-256 from ") + kNettle +
                ", which proves the job's key: install nettle (Debian and Ubuntu: libnettle8; RHEL and Amazon Linux: "
                "nettle)");
  }
  return loaded;
}

}  // namespace

HmacSha256::HmacSha256(const std::string& key) : context_{} {
  nettle().set_key(context_, key.size(), reinterpret_cast<const uint8_t*>(key.data()));
}

HmacSha256& HmacSha256::update(const void* data, std::size_t size) {
  nettle().update(context_, size, static_cast<const uint8_t*>(data));
  return *this;
}

std::string HmacSha256::hex() {
  uint8_t digest[kDigestBytes];
  nettle().digest(context_, sizeof digest, digest);
  static const char kDigits[] = "0123456789abcdef";
  std::string text;
  for (const uint8_t byte : digest) {
    text += kDigits[byte >> 4];
    text += kDigits[byte & 15];
  }
  return text;
}

std::string hmac_sha256_hex(const std::string& key, const std::string& message) {
  return HmacSha256(key).update(message).hex();
}

bool same_mac(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char differ = 0;
  for (std::size_t i = 0; i < a.size(); ++i) differ |= static_cast<unsigned char>(a[i] ^ b[i]);
  return differ == 0;
}

}  // namespace ddp
