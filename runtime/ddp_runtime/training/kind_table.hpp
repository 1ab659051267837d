#pragma once
// The entry of `kind` in one of the runtime's tables (losses, optimizers, schedules), whose entries each hold a
// `kind` member. Every kind has an entry; one without is a programming error, named with its table.
#include <cstddef>
#include <string>

#include "core/error.hpp"
#include "ddp_runtime/train_options.hpp"

namespace ddp::runtime {

// `noun` says what the kind is ("loss"), `table` where its entries are ("the table of losses (workloads.cpp)").
template <typename Entry, std::size_t N, typename Kind>
const Entry& entry_of(const Entry (&entries)[N], Kind kind, const char* noun, const char* table) {
  for (const Entry& entry : entries) {
    if (entry.kind == kind) return entry;
  }
  throw Error(std::string("the ") + noun + " " + to_string(kind) + " has no entry in " + table);
}

}  // namespace ddp::runtime
