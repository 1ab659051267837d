#pragma once
// Strict text-to-value conversions shared by every parser of the core library.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ddp {

// A decimal unsigned integer made of digits only (no sign, no spaces), at most `max`.
std::optional<uint64_t> parse_uint(std::string_view text, uint64_t max);

// Like parse_uint, but throws ddp::Error naming `what`, the text and the allowed range.
uint64_t require_uint(std::string_view text, uint64_t min, uint64_t max, std::string_view what);

// Text in single quotes for error messages: printable ASCII only, bounded length.
std::string quote(std::string_view text);

// `text` with every byte outside printable ASCII replaced by '?' (no terminal escapes, no line breaks), cut to
// `max_length` with "..." when longer: for text from other processes and users before it is printed.
std::string printable(std::string_view text, size_t max_length);

// The non-empty entries of a `separator`-separated list: "eth0,,ib0" is {"eth0", "ib0"}.
std::vector<std::string> split(std::string_view text, char separator);

}  // namespace ddp
