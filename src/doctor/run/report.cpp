#include "doctor/run/report.hpp"

#include <algorithm>
#include <array>
#include <set>

#include <nlohmann/json.hpp>

#include "base/parse.hpp"
#include "doctor/run/wire.hpp"

namespace ddp::doctor {
namespace {

constexpr size_t kColumns = 7;
constexpr size_t kMaxColumn = 80;  // a padded column: one long value must not widen every row
using Row = std::array<std::string, kColumns>;

std::vector<CheckResult> ordered(const std::vector<CheckResult>& results) {
  std::vector<CheckResult> rows = results;
  std::stable_sort(rows.begin(), rows.end(), [](const CheckResult& a, const CheckResult& b) {
    const auto key = [](const CheckResult& r) { return r.rank == CheckResult::kWholeRun ? 1 << 30 : r.rank; };
    return key(a) < key(b);
  });
  return rows;
}

// Printable ASCII only (no terminal escapes from other ranks' text), each column cut to its width.
Row table_row(const CheckResult& r) {
  const bool whole_run = r.rank == CheckResult::kWholeRun;
  Row row{whole_run ? "(all)" : r.host,    whole_run ? "-" : std::to_string(r.rank), r.check, to_string(r.status),
          r.value.empty() ? "-" : r.value, r.threshold.empty() ? "-" : r.threshold,  r.detail};
  for (size_t c = 0; c < kColumns; ++c) row[c] = printable(row[c], c + 1 < kColumns ? kMaxColumn : kMaxField);
  return row;
}

size_t node_count(const std::vector<CheckResult>& results) {
  std::set<std::string> hosts;
  for (const auto& r : results) {
    if (r.rank != CheckResult::kWholeRun) hosts.insert(r.host);
  }
  return hosts.size();
}

size_t count_of(const std::vector<CheckResult>& results, Status status) {
  return static_cast<size_t>(
      std::count_if(results.begin(), results.end(), [status](const CheckResult& r) { return r.status == status; }));
}

using Json = nlohmann::ordered_json;

// Printable ASCII, as in the table: what other ranks sent reaches scripts without escapes of any kind.
Json text(const std::string& value) { return printable(value, kMaxField); }

Json json_result(const CheckResult& r) {
  const bool whole_run = r.rank == CheckResult::kWholeRun;
  return {{"host", whole_run ? Json() : text(r.host)},
          {"rank", whole_run ? Json() : Json(r.rank)},
          {"check", text(r.check)},
          {"status", to_string(r.status)},
          {"value", text(r.value)},
          {"threshold", text(r.threshold)},
          {"detail", text(r.detail)}};
}

}  // namespace

std::string format_table(const Report& report) {
  std::vector<Row> rows{{"HOST", "RANK", "CHECK", "STATUS", "VALUE", "THRESHOLD", "DETAIL"}};
  for (const auto& r : ordered(report.results)) rows.push_back(table_row(r));
  std::array<size_t, kColumns> width{};
  for (const auto& row : rows) {
    for (size_t c = 0; c < kColumns; ++c) width[c] = std::max(width[c], row[c].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < kColumns; ++c) {
      line += row[c];
      // The last column is free text: padding it would only add trailing blanks.
      if (c + 1 < kColumns) line += std::string(width[c] - row[c].size() + 2, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

std::string format_summary(const Report& report) {
  const auto& results = report.results;
  return "ddp-doctor: " + std::to_string(node_count(results)) + " node(s), " + std::to_string(report.world_size) +
         " rank(s) via " + report.launcher + ": " + std::to_string(count_of(results, Status::Ok)) + " OK, " +
         std::to_string(count_of(results, Status::Warn)) + " WARN, " + std::to_string(count_of(results, Status::Fail)) +
         " FAIL, " + std::to_string(count_of(results, Status::Skip)) + " SKIP";
}

std::string format_json(const Report& report) {
  const auto& results = report.results;
  Json counts = Json::object();
  for (const Status status : {Status::Ok, Status::Warn, Status::Fail, Status::Skip}) {
    counts[to_string(status)] = count_of(results, status);
  }
  Json rows = Json::array();
  for (const auto& r : ordered(results)) rows.push_back(json_result(r));
  const Json json = {{"ok", exit_status(results) == 0},
                     {"launcher", text(report.launcher)},
                     {"world_size", report.world_size},
                     {"nodes", node_count(results)},
                     {"counts", counts},
                     {"results", rows}};
  return json.dump() + "\n";
}

int exit_status(const std::vector<CheckResult>& results) { return worst(results) == Status::Fail ? 1 : 0; }

}  // namespace ddp::doctor
