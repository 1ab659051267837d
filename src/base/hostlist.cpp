#include "base/hostlist.hpp"

#include "base/parse.hpp"
#include "core/error.hpp"

namespace ddp {
namespace {

constexpr uint64_t kMaxIndex = 999'999'999'999ULL;  // 12 digits keeps every product far from overflow

[[noreturn]] void fail(std::string_view expression, const std::string& what) {
  throw Error("bad node list " + quote(expression) + ": " + what +
              " (expected Slurm hostlist syntax such as node[01-04,07],login1)");
}

bool is_host_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
}

size_t checked_product(size_t a, size_t b, std::string_view expression) {
  if (b != 0 && a > Hostlist::kMaxHosts / b) {
    fail(expression, "more than " + std::to_string(Hostlist::kMaxHosts) + " hosts");
  }
  return a * b;
}

// Splits on commas that are outside brackets; brackets must balance and not nest.
std::vector<std::string_view> split_items(std::string_view expression) {
  std::vector<std::string_view> items;
  size_t start = 0;
  bool in_bracket = false;
  for (size_t i = 0; i <= expression.size(); ++i) {
    const char c = i < expression.size() ? expression[i] : ',';
    if (c == '[') {
      if (in_bracket) fail(expression, "nested '['");
      in_bracket = true;
    } else if (c == ']') {
      if (!in_bracket) fail(expression, "']' without '['");
      in_bracket = false;
    } else if (c == ',' && !in_bracket) {
      if (i == start) fail(expression, "empty host name");
      items.push_back(expression.substr(start, i - start));
      start = i + 1;
    }
  }
  if (in_bracket) fail(expression, "'[' without ']'");
  return items;
}

}  // namespace

Hostlist Hostlist::parse(std::string_view expression) {
  if (expression.empty()) fail(expression, "it is empty");
  Hostlist list;
  for (std::string_view item : split_items(expression)) {
    Pattern pattern = parse_pattern(item, expression);
    list.total_ += pattern.count;
    if (list.total_ > kMaxHosts) fail(expression, "more than " + std::to_string(kMaxHosts) + " hosts");
    list.patterns_.push_back(std::move(pattern));
  }
  return list;
}

Hostlist::Pattern Hostlist::parse_pattern(std::string_view item, std::string_view expression) {
  Pattern pattern;
  size_t i = 0;
  while (i < item.size()) {
    Part part;
    if (item[i] == '[') {
      const size_t close = item.find(']', i);
      part = parse_bracket(item.substr(i + 1, close - i - 1), expression);
      i = close + 1;
    } else {
      const size_t open = std::min(item.find('[', i), item.size());
      part.text = std::string(item.substr(i, open - i));
      for (char c : part.text) {
        if (!is_host_char(c)) fail(expression, "character " + quote(std::string_view(&c, 1)) + " in a host name");
      }
      i = open;
    }
    pattern.count = checked_product(pattern.count, part.count, expression);
    pattern.parts.push_back(std::move(part));
  }
  return pattern;
}

Hostlist::Part Hostlist::parse_bracket(std::string_view body, std::string_view expression) {
  if (body.empty()) fail(expression, "empty '[]'");
  Part part;
  part.count = 0;
  for_each_range(body, [&](std::string_view range, std::string_view low, std::string_view high) {
    const auto first = parse_uint(low, kMaxIndex);
    const auto last = parse_uint(high, kMaxIndex);
    if (!first || !last) fail(expression, "range " + quote(range) + " is not N or N-M with whole numbers");
    if (*last < *first) fail(expression, "range " + quote(range) + " counts down; write it low-high");
    const uint64_t count = *last - *first + 1;
    if (count > kMaxHosts) fail(expression, "more than " + std::to_string(kMaxHosts) + " hosts");
    part.ranges.push_back({*first, count, low.size()});
    part.count += static_cast<size_t>(count);
    if (part.count > kMaxHosts) fail(expression, "more than " + std::to_string(kMaxHosts) + " hosts");
  });
  return part;
}

std::string Hostlist::host_of(const Pattern& pattern, size_t index) {
  // Mixed-radix decomposition: the last bracket varies fastest, as Slurm expands them.
  std::vector<size_t> digits(pattern.parts.size(), 0);
  for (size_t p = pattern.parts.size(); p-- > 0;) {
    digits[p] = index % pattern.parts[p].count;
    index /= pattern.parts[p].count;
  }
  std::string host;
  for (size_t p = 0; p < pattern.parts.size(); ++p) {
    const Part& part = pattern.parts[p];
    if (part.ranges.empty()) {
      host += part.text;
      continue;
    }
    size_t offset = digits[p];
    for (const Range& range : part.ranges) {
      if (offset < range.count) {
        const std::string number = std::to_string(range.first + offset);
        if (number.size() < range.width) host.append(range.width - number.size(), '0');
        host += number;
        break;
      }
      offset -= static_cast<size_t>(range.count);
    }
  }
  return host;
}

std::string Hostlist::at(size_t index) const {
  if (index >= total_) {
    throw Error("host index " + std::to_string(index) + " is past the end of a list of " + std::to_string(total_));
  }
  for (const Pattern& pattern : patterns_) {
    if (index < pattern.count) return host_of(pattern, index);
    index -= pattern.count;
  }
  return {};  // unreachable: index < total_
}

std::vector<std::string> Hostlist::expand() const {
  std::vector<std::string> hosts;
  hosts.reserve(total_);
  for (const Pattern& pattern : patterns_) {
    for (size_t i = 0; i < pattern.count; ++i) hosts.push_back(host_of(pattern, i));
  }
  return hosts;
}

}  // namespace ddp
