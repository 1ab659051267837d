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
    throw Error(std::string(what) + " " + quote(text) + " is not a whole number from " + std::to_string(min) + " to " +
                std::to_string(max));
  }
  return *value;
}

std::string quote(std::string_view text) {
  // Values come from users and environments: keep error lines single-line and bounded.
  return "'" + printable(text, 120) + "'";
}

std::string printable(std::string_view text, size_t max_length) {
  std::string out;
  for (char c : text.substr(0, max_length)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  if (text.size() > max_length) out += "...";
  return out;
}

std::vector<std::string> split(std::string_view text, char separator) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t at; (at = text.find(separator, start)) != std::string_view::npos; start = at + 1) {
    if (at > start) parts.emplace_back(text.substr(start, at - start));
  }
  if (start < text.size()) parts.emplace_back(text.substr(start));
  return parts;
}

}  // namespace ddp
