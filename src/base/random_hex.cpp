#include "base/random_hex.hpp"

#include <sys/random.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "core/error.hpp"

namespace ddp {

std::string random_hex(std::size_t digits, const char* what) {
  std::vector<unsigned char> random((digits + 1) / 2);
  size_t got = 0;
  while (got < random.size()) {
    const ssize_t n = getrandom(random.data() + got, random.size() - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw Error(std::string("no random bytes for ") + what + " (getrandom: " + std::strerror(errno) + ")");
    got += static_cast<size_t>(n);
  }
  static const char kDigits[] = "0123456789abcdef";
  std::string text;
  for (unsigned char byte : random) {
    text += kDigits[byte >> 4];
    text += kDigits[byte & 15];
  }
  text.resize(digits);
  return text;
}

bool is_lower_hex(std::string_view text, std::size_t digits) {
  if (text.size() != digits) return false;
  for (char c : text) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace ddp
