// libFuzzer target: any text given as SLURM_STEP_NODELIST either parses into hosts that respect the bounds,
// or throws ddp::Error; it never crashes, hangs or allocates without bound.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "base/hostlist.hpp"
#include "core/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const ddp::Hostlist list = ddp::Hostlist::parse(text);
    if (list.size() == 0 || list.size() > ddp::Hostlist::kMaxHosts) std::abort();
    if (list.at(0).empty() || list.at(list.size() - 1).empty()) std::abort();
    if (list.size() <= 4096 && list.expand().size() != list.size()) std::abort();
  } catch (const ddp::Error&) {
  }
  return 0;
}
