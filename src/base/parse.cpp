#include "base/parse.hpp"

#include <charconv>

#include "core/error.hpp"

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

std::optional<int64_t> parse_int(std::string_view text) {
  int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size()) return std::nullopt;
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

namespace {

// The length of the UTF-8 sequence of one printable character at the start of `text` (U+00A0 and above, not a
// surrogate, shortest form), else 0.
size_t printable_utf8_length(std::string_view text) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(0);
  const size_t length = lead >= 0xF0 && lead <= 0xF4 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC2 && lead < 0xE0 ? 2 : 0;
  if (length == 0 || text.size() < length) return 0;
  uint32_t code = lead & (0x7F >> length);
  for (size_t i = 1; i < length; ++i) {
    if ((byte(i) & 0xC0) != 0x80) return 0;
    code = (code << 6) | (byte(i) & 0x3F);
  }
  const uint32_t shortest = length == 2 ? 0x80 : length == 3 ? 0x800 : 0x10000;
  if (code < shortest || code < 0xA0 || (code >= 0xD800 && code <= 0xDFFF) || code > 0x10FFFF) return 0;
  return length;
}

}  // namespace

std::string terminal_text(std::string_view text, size_t max_length) {
  std::string out;
  size_t i = 0;
  while (i < text.size() && i < max_length) {
    const char c = text[i];
    if (c >= 0x20 && c < 0x7f) {
      out += c;
      ++i;
      continue;
    }
    const size_t length = printable_utf8_length(text.substr(i));
    if (length > 0 && i + length <= max_length) {
      out.append(text.substr(i, length));
      i += length;
      continue;
    }
    if (length > 0) break;  // cut before a character that does not fit whole
    out += c == '\t' ? ' ' : '?';
    ++i;
  }
  if (i < text.size()) out += "...";
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
