#include "doctor/report.hpp"

#include <algorithm>
#include <array>
#include <cstdio>
#include <set>

namespace ddp::doctor {
namespace {

constexpr size_t kColumns = 7;
using Row = std::array<std::string, kColumns>;

std::vector<CheckResult> ordered(const std::vector<CheckResult>& results) {
  std::vector<CheckResult> rows = results;
  std::stable_sort(rows.begin(), rows.end(), [](const CheckResult& a, const CheckResult& b) {
    const auto key = [](const CheckResult& r) { return r.rank == CheckResult::kWholeRun ? 1 << 30 : r.rank; };
    return key(a) < key(b);
  });
  return rows;
}

// Fields come from peers: a terminal escape or a newline among them must reach the terminal as text.
std::string printable(const std::string& text) {
  std::string out;
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte != 0x7f) {
      out += c;
    } else {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\x%02x", byte);
      out += escaped;
    }
  }
  return out;
}

Row table_row(const CheckResult& r) {
  const bool whole_run = r.rank == CheckResult::kWholeRun;
  Row row{whole_run ? "(all)" : r.host, whole_run ? "-" : std::to_string(r.rank), r.check, to_string(r.status),
          r.value.empty() ? "-" : r.value, r.threshold.empty() ? "-" : r.threshold, r.detail};
  for (std::string& cell : row) cell = printable(cell);
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

std::string json_string(const std::string& text) { return "\"" + json_escape(text) + "\""; }

std::string json_result(const CheckResult& r) {
  return std::string("{\"host\":") + (r.rank == CheckResult::kWholeRun ? "null" : json_string(r.host)) +
         ",\"rank\":" + (r.rank == CheckResult::kWholeRun ? "null" : std::to_string(r.rank)) +
         ",\"check\":" + json_string(r.check) + ",\"status\":" + json_string(to_string(r.status)) +
         ",\"value\":" + json_string(r.value) + ",\"threshold\":" + json_string(r.threshold) +
         ",\"detail\":" + json_string(r.detail) + "}";
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
  std::string out = std::string("{\"ok\":") + (exit_status(results) == 0 ? "true" : "false") +
                    ",\"launcher\":" + json_string(report.launcher) +
                    ",\"world_size\":" + std::to_string(report.world_size) +
                    ",\"nodes\":" + std::to_string(node_count(results)) + ",\"counts\":{";
  const Status statuses[] = {Status::Ok, Status::Warn, Status::Fail, Status::Skip};
  for (size_t i = 0; i < 4; ++i) {
    out += (i ? "," : "") + json_string(to_string(statuses[i])) + ":" + std::to_string(count_of(results, statuses[i]));
  }
  out += "},\"results\":[";
  const auto rows = ordered(results);
  for (size_t i = 0; i < rows.size(); ++i) out += (i ? "," : "") + json_result(rows[i]);
  return out + "]}\n";
}

int exit_status(const std::vector<CheckResult>& results) { return worst(results) == Status::Fail ? 1 : 0; }

std::string json_escape(const std::string& text) {
  std::string out;
  for (const char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char escaped[8];
          std::snprintf(escaped, sizeof escaped, "\\u%04x", static_cast<unsigned char>(c));
          out += escaped;
        } else {
          out += c;
        }
    }
  }
  return out;
}

}  // namespace ddp::doctor
