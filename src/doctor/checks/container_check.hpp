#pragma once
// What a container lets the run see, for ddp-doctor run inside one (srun --ddp ch-run IMAGE -- ddp-doctor): the
// runtime, the snapshot directory srun --ddp prepared on the node, and /dev/shm, which NCCL's shared-memory
// transport fills (Docker's default of 64 MiB makes it fail). The contract itself is checked before the doctor
// starts (launch_from_environment refuses values that were cleared or replaced).
#include <string>
#include <vector>

#include "core/env.hpp"
#include "doctor/checks/check.hpp"

namespace ddp::doctor {

inline constexpr uint64_t kMinShmBytes = 1ull << 30;

// container.runtime (OK, which runtime the environment names, or none), container.snapshot_dir (FAIL where the
// directory srun --ddp prepared is missing in this view, with the runtime's mount option; SKIP where srun --ddp
// prepared none), container.shm (WARN below kMinShmBytes). `shm` is the directory to measure.
std::vector<CheckResult> container_checks(const EnvLookup& env, const std::string& snapshot_dir,
                                          const std::string& shm = "/dev/shm");

}  // namespace ddp::doctor
