#pragma once
// The rendezvous port (MASTER_PORT) of a step. One place decides it, on every node alike, with no
// communication: from the user's --ddp-port, else from ports Slurm reserved for the step, else from the
// step's ids inside the admin's range.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ddp {

struct PortRange {
  uint16_t first = 0;
  uint16_t last = 0;
  uint32_t size() const { return uint32_t{last} - first + 1; }
  bool contains(uint16_t port) const { return port >= first && port <= last; }
  bool overlaps(const PortRange& other) const { return first <= other.last && other.first <= last; }
  std::string text() const { return std::to_string(first) + "-" + std::to_string(last); }
};

// "20000-29999"; throws ddp::Error naming `what` on anything else.
PortRange parse_port_range(std::string_view text, std::string_view what);

// The kernel's ephemeral range from /proc/sys/net/ipv4/ip_local_port_range ("32768\t60999").
PortRange parse_ephemeral_range(std::string_view proc_text);
PortRange read_ephemeral_range(const std::string& path = "/proc/sys/net/ipv4/ip_local_port_range");

enum class PortSource { User, Reserved, Hashed };
const char* to_string(PortSource source);

struct PortChoice {
  uint16_t port = 0;
  PortSource source = PortSource::Hashed;
};

// Steps of one job that run at once get different ports (up to kStepsPerJob of them), and two jobs get
// different ports unless their ids are congruent modulo range.size() / kStepsPerJob (625 jobs apart for
// the default range of 10000 ports), so jobs that run together on a node, whose ids are close, do not meet.
constexpr uint32_t kStepsPerJob = 16;
uint16_t hashed_port(uint32_t job_id, uint32_t step_id, PortRange range);

// `reserved` is SLURM_STEP_RESV_PORTS ("12000-12003" or "12000,12007"), empty when none.
PortChoice choose_master_port(std::optional<uint16_t> user_port, std::string_view reserved, uint32_t job_id,
                              uint32_t step_id, PortRange range);

}  // namespace ddp
