#pragma once
// The list syntax Slurm and the kernel use for CPUs, cores and GPUs: "0-3,8,10-11"
// (S_STEP_ALLOC_CORES, SLURM_STEP_GPUS, /sys/devices/system/cpu/online, taskset -c).
#include <string>
#include <string_view>
#include <vector>

namespace ddp {

// Ids above this are rejected, so a hostile or corrupt "0-4000000000" costs nothing.
constexpr unsigned kMaxListedId = 65535;

// Sorted ids without repeats. Throws ddp::Error naming `what` and the text for an empty list, a bad
// number, a range that runs backwards or an id above kMaxListedId.
std::vector<unsigned> parse_id_list(std::string_view text, std::string_view what);

// The shortest list text for sorted, unique ids: {0,1,2,3,8} -> "0-3,8"; empty for none.
std::string format_id_list(const std::vector<unsigned>& sorted_ids);

}  // namespace ddp
