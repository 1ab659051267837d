#pragma once
// A range of TCP ports, "FIRST-LAST", and the kernel's ephemeral range (net.ipv4.ip_local_port_range): the ports
// a node hands to outgoing connections, which a port meant for listening must stay out of. The plugin checks its
// port_range against its own node's; ddp-doctor compares MASTER_PORT with every node's.
#include <cstdint>
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
inline constexpr const char* kEphemeralRangePath = "/proc/sys/net/ipv4/ip_local_port_range";
PortRange parse_ephemeral_range(std::string_view proc_text);
PortRange read_ephemeral_range(const std::string& path = kEphemeralRangePath);

}  // namespace ddp
