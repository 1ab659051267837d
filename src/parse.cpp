#include "parse.hpp"

#include "error.hpp"

namespace ddp {

std::optional<uint64_t> parse_uint(std::string_view text, uint64_t max) {
  if (text.empty() || text.size() > 20) return std::nullopt;
  uint64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    const uint64_t digit = static_cast<uint64_t>(c - '0');
    if (digit > max || value > (max - digit) / 10) return std::nullopt;  // max - digit must not wrap
    value = value * 10 + digit;
  }
  return value;
}

uint64_t require_uint(std::string_view text, uint64_t min, uint64_t max, std::string_view what) {
  const auto value = parse_uint(text, max);
  if (!value || *value < min) {
    throw Error(std::string(what) + " " + quote(text) + " is not a whole number from " + std::to_string(min) +
                " to " + std::to_string(max));
  }
  return *value;
}

std::string quote(std::string_view text) {
  // Values come from users and environments: keep error lines single-line and bounded.
  constexpr size_t kMaxShown = 120;
  std::string out = "'";
  for (char c : text.substr(0, kMaxShown)) {
    out += (c >= 0x20 && c < 0x7f) ? c : '?';
  }
  if (text.size() > kMaxShown) out += "...";
  return out + "'";
}

}  // namespace ddp
