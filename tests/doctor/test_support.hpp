#pragma once
// Helpers shared by the doctor's unit tests: the common ones (tests/common), a fake environment, and lookups
// into result lists.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "doctor/check.hpp"
#include "doctor/doctor_options.hpp"
#include "env.hpp"
#include "test_common.hpp"

namespace ddp::doctor::testing {

using ddp::testing::TempDir;

inline void write_file(const std::string& path, const std::string& content) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path) << content;
}

// The time budget of a run with --timeout `timeout`.
inline TimeBudget budget_of(std::chrono::milliseconds timeout) {
  DoctorOptions options;
  options.timeout = timeout;
  return time_budget(options);
}

inline const CheckResult* find_check(const std::vector<CheckResult>& results, const std::string& check) {
  for (const auto& result : results) {
    if (result.check == check) return &result;
  }
  return nullptr;
}

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace ddp::doctor::testing
