#pragma once
// Helpers shared by the doctor's unit tests: the common ones (tests/common), a fake environment, lookups into
// result lists, and ranks as threads.
#include <gtest/gtest.h>

#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/env.hpp"
#include "doctor/checks/check.hpp"
#include "doctor/run/doctor_options.hpp"
#include "test_common.hpp"

namespace ddp::doctor::testing {

using ddp::testing::error_of;
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

// Runs body(0) .. body(count - 1), each on a thread of its own (ranks of a run), and rethrows the first exception
// after all have ended: a rank that fails is a failed test, not an exception escaping a thread (std::terminate).
inline void on_threads(int count, const std::function<void(int)>& body) {
  std::vector<std::exception_ptr> errors(static_cast<size_t>(count));
  std::vector<std::thread> threads;
  for (int i = 0; i < count; ++i) {
    threads.emplace_back([&, i] {
      try {
        body(i);
      } catch (...) {
        errors[static_cast<size_t>(i)] = std::current_exception();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (const auto& error : errors) {
    if (error) std::rethrow_exception(error);
  }
}

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace ddp::doctor::testing
