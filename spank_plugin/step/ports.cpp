#include "spank_plugin/step/ports.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "base/parse.hpp"
#include "core/error.hpp"

namespace ddp {

const char* to_string(PortSource source) {
  switch (source) {
    case PortSource::User: return "user";
    case PortSource::Reserved: return "reserved";
    case PortSource::Hashed: return "hash";
  }
  return "?";
}

uint16_t hashed_port(uint32_t job_id, uint32_t step_id, PortRange range, std::string_view job_key) {
  if (is_job_key(job_key)) {
    const auto seed = static_cast<uint32_t>(std::stoul(std::string(job_key.substr(0, 8)), nullptr, 16));
    return static_cast<uint16_t>(range.first + (uint64_t{seed} + step_id) % range.size());
  }
  const uint32_t slots = std::min(kStepsPerJob, range.size());
  const uint32_t blocks = range.size() / slots;
  return static_cast<uint16_t>(range.first + (job_id % blocks) * slots + step_id % slots);
}

std::vector<PortRange> parse_reserved_ports(std::string_view text) {
  constexpr std::string_view kWhat = "SLURM_STEP_RESV_PORTS (set by Slurm's MpiParams=ports)";
  constexpr size_t kMaxItems = 1024;  // Slurm reserves a handful per step; bounds the work on odd input
  std::vector<PortRange> ranges;
  for_each_range(text, [&](std::string_view, std::string_view first_text, std::string_view last_text) {
    const auto first = require_uint(first_text, 1, 65535, kWhat);
    const auto last = require_uint(last_text, 1, 65535, kWhat);
    if (last < first || (!ranges.empty() && first <= ranges.back().last) || ranges.size() == kMaxItems) {
      throw Error(std::string(kWhat) + " " + quote(text) + " is not an ascending list of ports and FIRST-LAST ranges");
    }
    ranges.push_back({static_cast<uint16_t>(first), static_cast<uint16_t>(last)});
  });
  return ranges;
}

MasterPort choose_master_port(std::optional<uint16_t> user_port, std::string_view reserved, uint32_t job_id,
                              uint32_t step_id, PortRange range, std::string_view job_key) {
  if (user_port) return {*user_port, PortSource::User};
  if (!reserved.empty()) return {parse_reserved_ports(reserved).front().first, PortSource::Reserved};
  return {hashed_port(job_id, step_id, range, job_key), PortSource::Hashed};
}

}  // namespace ddp
