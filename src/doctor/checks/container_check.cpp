#include "doctor/checks/container_check.hpp"

#include <sys/statvfs.h>

#include <cerrno>
#include <cstring>

#include "core/container.hpp"
#include "core/env_names.hpp"
#include "core/error.hpp"

namespace ddp::doctor {
namespace {

CheckResult runtime_check(const EnvLookup& env) {
  const ContainerKind kind = container_from_environment(env);
  const std::string contract = env(kContractVariable) ? "the values srun --ddp set arrived unchanged (DDP_CONTRACT)"
                                                      : "not started by srun --ddp (no DDP_CONTRACT)";
  const std::string mount = *kind.mount == '\0' ? "" : "; node directories are mounted with " + std::string(kind.mount);
  return make_result(checks::kContainerRuntime, Status::Ok, kind.name, "", contract + mount);
}

CheckResult snapshot_dir_check(const EnvLookup& env, const std::string& dir) {
  const auto contract = env(kContractVariable);
  bool prepared = false;
  if (contract && !dir.empty()) {
    for (const auto& [name, value] : decode_contract(*contract))
      prepared = prepared || (name == vars::kSnapshotDir && value == dir);
  }
  if (!prepared)
    return skipped(checks::kContainerSnapshotDir, "srun --ddp prepared no snapshot directory for this run");
  try {
    require_prepared_dir(dir, env);
  } catch (const Error& e) {
    return make_result(checks::kContainerSnapshotDir, Status::Fail, "missing", "present", e.what());
  }
  return make_result(checks::kContainerSnapshotDir, Status::Ok, "present", "present", dir);
}

CheckResult shm_check(const std::string& shm) {
  struct statvfs info = {};
  if (statvfs(shm.c_str(), &info) != 0) {
    return make_result(checks::kContainerShm, Status::Warn, "unreadable", format_bytes(kMinShmBytes),
                       shm + ": " + std::strerror(errno) + "; NCCL's shared-memory transport needs it");
  }
  const uint64_t bytes = static_cast<uint64_t>(info.f_blocks) * info.f_frsize;
  const Status status = bytes < kMinShmBytes ? Status::Warn : Status::Ok;
  const std::string detail = status == Status::Ok ? shm
                                                  : shm +
                                                        " is small for NCCL's shared-memory buffers between the "
                                                        "GPUs of a node; give the container more (docker: "
                                                        "--shm-size; enroot and ch-run use the node's /dev/shm)";
  return make_result(checks::kContainerShm, status, format_bytes(bytes), "at least " + format_bytes(kMinShmBytes),
                     detail);
}

}  // namespace

std::vector<CheckResult> container_checks(const EnvLookup& env, const std::string& snapshot_dir,
                                          const std::string& shm) {
  return {runtime_check(env), snapshot_dir_check(env, snapshot_dir), shm_check(shm)};
}

}  // namespace ddp::doctor
