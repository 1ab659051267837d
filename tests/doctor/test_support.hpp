#pragma once
// Helpers shared by the doctor's unit tests: a temporary directory that cleans up after itself, a fake
// environment, and lookups into result lists.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "doctor/check.hpp"
#include "task_env.hpp"

namespace ddp::doctor::testing {

class TempDir {
 public:
  TempDir() {
    char name[] = "/tmp/ddp-doctor-test-XXXXXX";
    if (mkdtemp(name) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = name;
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& relative) const { return path_ + "/" + relative; }

 private:
  std::string path_;
};

inline void write_file(const std::string& path, const std::string& content) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path) << content;
}

inline EnvLookup fake_env(std::map<std::string, std::string> values) {
  return [values = std::move(values)](const std::string& name) -> std::optional<std::string> {
    const auto found = values.find(name);
    if (found == values.end()) return std::nullopt;
    return found->second;
  };
}

inline const CheckResult* find_check(const std::vector<CheckResult>& results, const std::string& check) {
  for (const auto& result : results) {
    if (result.check == check) return &result;
  }
  return nullptr;
}

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace ddp::doctor::testing
