// libFuzzer target: CPU, core and GPU id lists (S_STEP_ALLOC_CORES, SLURM_STEP_GPUS, sysfs lists). Any text either
// parses into sorted, unique ids within kMaxListedId that format back to the same ids, or throws ddp::Error.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "core/error.hpp"
#include "topology/id_list.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const std::vector<unsigned> ids = ddp::parse_id_list(text, "fuzz");
    if (ids.empty()) std::abort();
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] > ddp::kMaxListedId || (i > 0 && ids[i] <= ids[i - 1])) std::abort();
    }
    if (ddp::parse_id_list(ddp::format_id_list(ids), "again") != ids) std::abort();
  } catch (const ddp::Error&) {
  }
  return 0;
}
