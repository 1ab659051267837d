#include "topology/id_list.hpp"

#include <algorithm>
#include <utility>

#include "base/parse.hpp"
#include "core/error.hpp"

namespace ddp {
namespace {

[[noreturn]] void reject(std::string_view text, std::string_view what, const std::string& why) {
  throw Error(std::string(what) + " " + quote(text) + ": " + why +
              "; write ids and ranges separated by commas, like '0-3,8'");
}

unsigned parse_id(std::string_view number, std::string_view text, std::string_view what) {
  const auto id = parse_uint(number, kMaxListedId);
  if (!id) reject(text, what, quote(number) + " is not a number from 0 to " + std::to_string(kMaxListedId));
  return static_cast<unsigned>(*id);
}

}  // namespace

std::vector<unsigned> parse_id_list(std::string_view text, std::string_view what) {
  if (text.empty()) reject(text, what, "the list is empty");
  // Ranges are merged before they are expanded, so repeated wide ranges cost no more than one.
  std::vector<std::pair<unsigned, unsigned>> ranges;
  for_each_range(text, [&](std::string_view item, std::string_view first_text, std::string_view last_text) {
    const unsigned first = parse_id(first_text, text, what);
    const unsigned last = parse_id(last_text, text, what);
    if (last < first) reject(text, what, "the range " + quote(item) + " runs backwards");
    ranges.emplace_back(first, last);
  });
  std::sort(ranges.begin(), ranges.end());
  std::vector<unsigned> ids;
  for (const auto& [first, last] : ranges) {
    const unsigned from = ids.empty() ? first : std::max(first, ids.back() + 1);
    for (unsigned id = from; id <= last; ++id) ids.push_back(id);
  }
  return ids;
}

std::string format_id_list(const std::vector<unsigned>& sorted_ids) {
  std::string text;
  for (size_t i = 0; i < sorted_ids.size();) {
    size_t end = i;
    while (end + 1 < sorted_ids.size() && sorted_ids[end + 1] == sorted_ids[end] + 1) ++end;
    if (!text.empty()) text += ',';
    text += std::to_string(sorted_ids[i]);
    if (end > i) text += '-' + std::to_string(sorted_ids[end]);
    i = end + 1;
  }
  return text;
}

}  // namespace ddp
