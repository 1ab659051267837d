// The texts of recovery in place (recovery_records.hpp): a member's report, a generation's list, the group file.
#include "ddp_runtime/distributed/recovery_records.hpp"

#include <cstring>
#include <exception>
#include <fstream>
#include <optional>
#include <sstream>

#include "ddp_runtime/distributed/store_auth.hpp"

namespace ddp::runtime {
namespace {

constexpr char kGroupEnded[] = "ddp-train group ended";
constexpr char kGroupHeader[] = "ddp-train group ";  // then the generation

}  // namespace

std::string report_text(const MemberReport& report) {
  return std::to_string(report.step) + ":" + (report.has_state ? "1" : "0");
}

MemberReport parse_report(const std::string& text) {
  MemberReport report;
  const std::size_t colon = text.find(':');
  report.step = std::stoll(text.substr(0, colon));
  report.has_state = colon != std::string::npos && text.substr(colon + 1) == "1";
  return report;
}

std::string Recovery::GenerationList::encode() const {
  std::ostringstream out;
  out << (formed ? "formed" : "fallback") << '\n' << verdict << '\n' << next_id << '\n' << members.size() << '\n';
  for (const Entry& e : members) {
    out << e.id << '\t' << e.step << '\t' << e.has_state << '\t' << e.identity.host << '\t' << e.identity.device << '\t'
        << e.identity.standby << '\n';
  }
  out << lost.size() << '\n';
  for (const auto& [id, dead] : lost) out << id << '\t' << dead << '\n';
  return out.str();
}

Recovery::GenerationList Recovery::GenerationList::decode(const std::string& text) {
  GenerationList decoded;
  std::istringstream in(text);
  std::string line;
  std::getline(in, line);
  decoded.formed = line == "formed";
  std::getline(in, decoded.verdict);
  std::getline(in, line);
  decoded.next_id = std::stoi(line);
  std::getline(in, line);
  for (int i = std::stoi(line); i > 0 && std::getline(in, line); --i) {
    std::vector<std::string> fields;
    std::istringstream row(line);
    for (std::string field; std::getline(row, field, '\t');) fields.push_back(field);
    fields.resize(6);
    Entry e;
    e.id = std::stoi(fields[0]);
    e.step = std::stoll(fields[1]);
    e.has_state = fields[2] == "1";
    e.identity = {fields[3], fields[4], fields[5], e.id};
    decoded.members.push_back(e);
  }
  std::getline(in, line);
  for (int i = std::stoi(line); i > 0 && std::getline(in, line); --i) {
    const std::size_t tab = line.find('\t');
    decoded.lost.emplace_back(std::stoi(line.substr(0, tab)), line.substr(tab + 1) == "1");
  }
  return decoded;
}

std::string GroupFile::encode() const {
  if (ended) return std::string(kGroupEnded) + "\n";
  std::string text = kGroupHeader + std::to_string(generation) + "\n";
  for (const auto& [id, standby] : members) text += std::to_string(id) + "\t" + standby + "\n";
  return text;
}

GroupFile parse_group_file(const Launch& launch, const std::string& run_id, const std::string& sealed) {
  GroupFile file;
  const std::optional<std::string> text = open_record(launch, run_id, kGroupFileRecord, sealed);
  if (!text) {
    file.unsealed = !sealed.empty();
    return file;
  }
  std::istringstream in(*text);
  std::string line;
  if (!std::getline(in, line)) return file;
  file.ended = line == kGroupEnded;
  if (file.ended || line.rfind(kGroupHeader, 0) != 0) return file;
  try {
    file.generation = std::stoll(line.substr(std::strlen(kGroupHeader)));
    while (std::getline(in, line) && file.members.size() < 100000) {
      const std::size_t tab = line.find('\t');
      if (tab == std::string::npos || tab == 0) return {};
      file.members.emplace_back(std::stoi(line.substr(0, tab)), line.substr(tab + 1));
    }
  } catch (const std::exception&) {
    return {};
  }
  return file;
}

GroupFile read_group_file(const Launch& launch, const std::string& run_id, const std::string& path) {
  std::ifstream in(path);
  std::stringstream content;
  content << in.rdbuf();
  return parse_group_file(launch, run_id, content.str());
}

}  // namespace ddp::runtime
