#pragma once
// Strict text-to-value conversions shared by every parser of the core library.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ddp {

// A decimal unsigned integer made of digits only (no sign, no spaces), at most `max`.
std::optional<uint64_t> parse_uint(std::string_view text, uint64_t max);

// A decimal 64-bit integer, the whole text: an optional '-', then digits (no '+', no spaces).
std::optional<int64_t> parse_int(std::string_view text);

// Like parse_uint, but throws ddp::Error naming `what`, the text and the allowed range.
uint64_t require_uint(std::string_view text, uint64_t min, uint64_t max, std::string_view what);

// Text in single quotes for error messages: printable ASCII only, bounded length.
std::string quote(std::string_view text);

// `text` with every byte outside printable ASCII replaced by '?' (no terminal escapes, no line breaks), cut to
// `max_length` with "..." when longer: for text from other processes and users before it is printed.
std::string printable(std::string_view text, size_t max_length);

// `text` safe to print on a terminal, cut to `max_length` bytes with "..." when longer: printable ASCII and UTF-8
// sequences of printable characters are kept (a traceback's non-English message stays readable), a tab becomes a
// space, and every other byte (line breaks, escapes and other controls, DEL, C1 controls, invalid UTF-8) becomes
// '?'. For one line of a report or of a task's output.
std::string terminal_text(std::string_view text, size_t max_length);

// The non-empty entries of a `separator`-separated list: "eth0,,ib0" is {"eth0", "ib0"}.
std::vector<std::string> split(std::string_view text, char separator);

// Calls on_range(item, first, last) for each item of a comma-separated list of numbers and FIRST-LAST ranges ("0-3,8"),
// in order, empty items included so that the caller refuses them: `last` is `first` where the item is one number. The
// caller converts the numbers, with its own limits and errors.
template <typename OnRange>
void for_each_range(std::string_view text, OnRange on_range) {
  for (size_t start = 0; start <= text.size();) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string_view item = text.substr(start, comma - start);
    const size_t dash = item.find('-');
    const std::string_view first = item.substr(0, dash);
    on_range(item, first, dash == std::string_view::npos ? first : item.substr(dash + 1));
    start = comma + 1;
  }
}

}  // namespace ddp
