#include "doctor/checks/catalogue.hpp"

#include <algorithm>
#include <cstring>

namespace ddp::doctor {

const char* to_string(Where where) {
  switch (where) {
    case Where::Node: return "node";
    case Where::NodeLeader: return "node leader";
    case Where::EveryTask: return "every task";
    case Where::RankZero: return "rank 0";
    case Where::AcrossNodes: return "across nodes";
  }
  return "?";
}

const std::vector<const CheckInfo*>& catalogue() {
#define DDP_DOCTOR_CHECK_ADDRESS(constant, ...) &checks::constant,
  static const std::vector<const CheckInfo*> entries{DDP_DOCTOR_CHECKS(DDP_DOCTOR_CHECK_ADDRESS)};
#undef DDP_DOCTOR_CHECK_ADDRESS
  return entries;
}

const CheckInfo* find_check(const std::string& name) {
  const auto& entries = catalogue();
  const auto found =
      std::find_if(entries.begin(), entries.end(), [&](const CheckInfo* entry) { return name == entry->name; });
  return found == entries.end() ? nullptr : *found;
}

std::string catalogue_text() {
  constexpr int kNameWidth = 24;
  constexpr int kWhereWidth = 14;
  std::string text = "check                   where         threshold option       what it checks\n";
  for (const CheckInfo* entry : catalogue()) {
    std::string line = entry->name;
    line.resize(std::max<size_t>(kNameWidth, line.size() + 1), ' ');
    line += to_string(entry->where);
    line.resize(std::max<size_t>(kNameWidth + kWhereWidth, line.size() + 1), ' ');
    line += *entry->threshold_option ? entry->threshold_option : "-";
    line.resize(std::max<size_t>(kNameWidth + kWhereWidth + 23, line.size() + 1), ' ');
    text += line + entry->what + "\n";
  }
  return text;
}

}  // namespace ddp::doctor
