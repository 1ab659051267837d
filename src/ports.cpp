#include "ports.hpp"

#include <fstream>
#include <sstream>

#include "error.hpp"
#include "parse.hpp"

namespace ddp {

PortRange parse_port_range(std::string_view text, std::string_view what) {
  const size_t dash = text.find('-');
  const auto first = parse_uint(text.substr(0, dash), 65535);
  const auto last = dash == std::string_view::npos ? std::nullopt : parse_uint(text.substr(dash + 1), 65535);
  if (!first || !last || *first == 0 || *last < *first) {
    throw Error(std::string(what) + " " + quote(text) +
                " is not a port range FIRST-LAST within 1-65535, e.g. 20000-29999");
  }
  return {static_cast<uint16_t>(*first), static_cast<uint16_t>(*last)};
}

PortRange parse_ephemeral_range(std::string_view proc_text) {
  std::istringstream in{std::string(proc_text)};
  uint32_t first = 0, last = 0;
  if (!(in >> first >> last) || first == 0 || last > 65535 || last < first) {
    throw Error("cannot read the kernel's ephemeral port range from " + quote(proc_text));
  }
  return {static_cast<uint16_t>(first), static_cast<uint16_t>(last)};
}

PortRange read_ephemeral_range(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  if (!file) throw Error("cannot read " + path + ": the kernel's ephemeral port range is needed to check port_range");
  return parse_ephemeral_range(text.str());
}

const char* to_string(PortSource source) {
  switch (source) {
    case PortSource::User: return "user";
    case PortSource::Reserved: return "reserved";
    case PortSource::Hashed: return "hash";
  }
  return "?";
}

uint16_t hashed_port(uint32_t job_id, uint32_t step_id, PortRange range) {
  const uint32_t slots = std::min(kStepsPerJob, range.size());
  const uint32_t blocks = range.size() / slots;
  return static_cast<uint16_t>(range.first + (job_id % blocks) * slots + step_id % slots);
}

PortChoice choose_master_port(std::optional<uint16_t> user_port, std::string_view reserved, uint32_t job_id,
                              uint32_t step_id, PortRange range) {
  if (user_port) return {*user_port, PortSource::User};
  if (!reserved.empty()) {
    const size_t end = reserved.find_first_of("-,");
    const auto port = static_cast<uint16_t>(
        require_uint(reserved.substr(0, end), 1, 65535, "SLURM_STEP_RESV_PORTS (set by Slurm's MpiParams=ports)"));
    return {port, PortSource::Reserved};
  }
  return {hashed_port(job_id, step_id, range), PortSource::Hashed};
}

}  // namespace ddp
