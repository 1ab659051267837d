#include "doctor/checks/check.hpp"

#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace ddp::doctor {

const char* to_string(Status status) {
  switch (status) {
    case Status::Ok: return "OK";
    case Status::Warn: return "WARN";
    case Status::Fail: return "FAIL";
    case Status::Skip: return "SKIP";
  }
  return "?";
}

CheckResult make_result(const CheckInfo& check, Status status, std::string value, std::string threshold,
                        std::string detail) {
  CheckResult result;
  result.check = check.name;
  result.status = status;
  result.value = std::move(value);
  result.threshold = std::move(threshold);
  result.detail = std::move(detail);
  return result;
}

CheckResult skipped(const CheckInfo& check, std::string why) {
  return make_result(check, Status::Skip, "-", "", std::move(why));
}

std::vector<CheckResult>& ran_at(std::initializer_list<Where> places, std::vector<CheckResult>& results) {
  for (const CheckResult& result : results) {
    const CheckInfo* entry = find_check(result.check);
    if (entry == nullptr) throw std::logic_error("check " + result.check + " is not in catalogue.hpp; add its row");
    bool allowed = false;
    std::string names;
    for (Where place : places) {
      allowed = allowed || place == entry->where;
      names += (names.empty() ? "" : " or ") + std::string(to_string(place));
    }
    if (!allowed) {
      throw std::logic_error("check " + result.check + " is declared for " + to_string(entry->where) + " but ran at " +
                             names + "; run it from its place or change its row's where in catalogue.hpp");
    }
  }
  return results;
}

Status worst(const std::vector<CheckResult>& results) {
  Status status = Status::Ok;
  for (const auto& result : results) {
    if (result.status == Status::Fail) return Status::Fail;
    if (result.status == Status::Warn) status = Status::Warn;
  }
  return status;
}

Status grade_at_least(double measured, double warn_below, double fail_below) {
  if (measured < fail_below) return Status::Fail;
  if (measured < warn_below) return Status::Warn;
  return Status::Ok;
}

Status grade_at_most(double measured, double warn_above, double fail_above) {
  if (measured > fail_above) return Status::Fail;
  if (measured > warn_above) return Status::Warn;
  return Status::Ok;
}

std::string format_fixed(double value, int decimals) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", decimals, value);
  return text;
}

std::string format_bytes(uint64_t bytes) {
  static const char* const kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double scaled = static_cast<double>(bytes) / 1024;
  size_t unit = 0;
  while (scaled >= 1024 && unit + 1 < sizeof kUnits / sizeof kUnits[0]) {
    scaled /= 1024;
    ++unit;
  }
  // Whole sizes such as the all-reduce message sizes read better without a fraction.
  const bool whole = std::fabs(scaled - std::round(scaled)) < 1e-9;
  return format_fixed(scaled, whole ? 0 : 1) + " " + kUnits[unit];
}

std::string format_gbits(double bytes_per_second) { return format_fixed(bytes_per_second * 8 / 1e9, 2) + " Gbit/s"; }

std::string format_mbytes(double bytes_per_second) { return format_fixed(bytes_per_second / 1e6, 1) + " MB/s"; }

std::string format_gbytes(double bytes_per_second) { return format_fixed(bytes_per_second / 1e9, 2) + " GB/s"; }

std::string format_seconds(double seconds) {
  const double magnitude = std::fabs(seconds);
  if (magnitude < 1e-3) return format_fixed(seconds * 1e6, 0) + " us";
  if (magnitude < 1) return format_fixed(seconds * 1e3, 2) + " ms";
  return format_fixed(seconds, 2) + " s";
}

}  // namespace ddp::doctor
