// libFuzzer target: port text from Slurm and admins (SLURM_STEP_RESV_PORTS, port_range=, the kernel's ephemeral
// range) and the port choice that follows. The first byte picks what the rest is; the chosen port always lies in
// what it was chosen from.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/error.hpp"
#include "spank_plugin/step/ports.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  const ddp::PortRange range{20000, 29999};
  try {
    switch (data[0] % 4) {
      case 0: {
        const auto ranges = ddp::parse_reserved_ports(text);
        if (ranges.empty() || ranges.size() > 1024) std::abort();
        for (size_t i = 0; i < ranges.size(); ++i) {
          if (ranges[i].first == 0 || ranges[i].last < ranges[i].first) std::abort();
          if (i > 0 && ranges[i].first <= ranges[i - 1].last) std::abort();
        }
        if (ddp::choose_master_port(std::nullopt, text, 1, 2, range).number != ranges[0].first) std::abort();
        break;
      }
      case 1: {
        const ddp::PortRange parsed = ddp::parse_port_range(text, "port_range");
        if (parsed.first == 0 || parsed.last < parsed.first) std::abort();
        break;
      }
      case 2: {
        const ddp::PortRange parsed = ddp::parse_ephemeral_range(text);
        if (parsed.first == 0 || parsed.last < parsed.first) std::abort();
        break;
      }
      default: {
        // A job key as the environment holds it: the derived port stays inside the range, whatever the text.
        const uint32_t step = size > 1 ? data[1] : 0;
        if (!range.contains(ddp::hashed_port(4711, step, range, text))) std::abort();
        if (!range.contains(ddp::choose_master_port(std::nullopt, "", 4711, step, range, text).number)) std::abort();
      }
    }
  } catch (const ddp::Error&) {
  }
  return 0;
}
