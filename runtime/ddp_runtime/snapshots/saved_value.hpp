#pragma once
// Values read out of a snapshot's dictionaries (torch.save's pickled dicts, as ours or Python's code wrote them):
// a missing key, or a number that is not one, throws SnapshotCorrupt naming the file.
#include <ATen/core/Dict.h>
#include <ATen/core/ivalue.h>

#include <string>

#include "ddp_runtime/snapshots/snapshot_files.hpp"

namespace ddp::runtime {

// dict[key] of the snapshot at `path`.
inline c10::IValue saved_entry(const c10::impl::GenericDict& dict, const std::string& key, const std::string& path) {
  const auto found = dict.find(key);
  if (found == dict.end()) throw SnapshotCorrupt(path + " has no " + key);
  return found->value();
}

// A float or an integer (Python writes either), as a double; `what` names it.
inline double saved_number(const c10::IValue& value, const std::string& what, const std::string& path) {
  if (value.isDouble()) return value.toDouble();
  if (value.isInt()) return static_cast<double>(value.toInt());
  throw SnapshotCorrupt(path + ": " + what + " is not a number");
}

}  // namespace ddp::runtime
