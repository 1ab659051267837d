#include "doctor/launch.hpp"

#include "error.hpp"
#include "parse.hpp"

namespace ddp::doctor {
namespace {

constexpr uint64_t kMaxRanks = 1u << 20;

int required_int(const EnvLookup& env, const std::string& name, uint64_t max) {
  const auto value = env(name);
  if (!value) throw Error(name + " is not set; start ddp-doctor with srun --ddp, torchrun or mpirun");
  return static_cast<int>(require_uint(*value, 0, max, name));
}

int optional_int(const EnvLookup& env, const std::string& name, uint64_t max) {
  const auto value = env(name);
  return value ? static_cast<int>(require_uint(*value, 0, max, name)) : 0;
}

void read_master(const EnvLookup& env, const DoctorOptions& options, Launch& launch) {
  launch.master_addr = options.master_addr.value_or(env("MASTER_ADDR").value_or(""));
  if (options.master_port) {
    launch.master_port = options.master_port;
  } else if (const auto port = env("MASTER_PORT")) {
    launch.master_port = static_cast<uint16_t>(require_uint(*port, 1, 65535, "MASTER_PORT"));
  }
}

void check_rank(const Launch& launch, const std::string& rank_name, const std::string& size_name) {
  if (launch.world_size < 1) throw Error(size_name + " '0' must be at least 1");
  if (launch.rank >= launch.world_size) {
    throw Error(rank_name + " " + quote(std::to_string(launch.rank)) + " is not below " + size_name + " " +
                std::to_string(launch.world_size) + "; every rank must be one of 0.." + size_name + "-1");
  }
}

}  // namespace

Launch detect_launch(const EnvLookup& env, const DoctorOptions& options) {
  Launch launch;
  launch.nccl_backend = env("DDP_BACKEND").value_or("") == "nccl";
  read_master(env, options, launch);
  if (env("OMPI_COMM_WORLD_SIZE")) {
    launch.kind = LaunchKind::Mpi;
    launch.rank = required_int(env, "OMPI_COMM_WORLD_RANK", kMaxRanks);
    launch.world_size = required_int(env, "OMPI_COMM_WORLD_SIZE", kMaxRanks);
    launch.local_rank = optional_int(env, "OMPI_COMM_WORLD_LOCAL_RANK", kMaxRanks);
    check_rank(launch, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE");
    return launch;
  }
  if (!env("RANK") && !env("WORLD_SIZE")) return launch;
  launch.kind = LaunchKind::Env;
  launch.rank = required_int(env, "RANK", kMaxRanks);
  launch.world_size = required_int(env, "WORLD_SIZE", kMaxRanks);
  launch.local_rank = optional_int(env, "LOCAL_RANK", kMaxRanks);
  launch.session = env("TORCHELASTIC_RUN_ID").value_or("");
  check_rank(launch, "RANK", "WORLD_SIZE");
  if (launch.world_size > 1 && launch.master_addr.empty()) {
    throw Error("RANK and WORLD_SIZE are set but MASTER_ADDR is not; export it (srun --ddp does) or pass --master-addr");
  }
  if (launch.world_size > 1 && !launch.master_port) {
    throw Error("RANK and WORLD_SIZE are set but MASTER_PORT is not; export it (srun --ddp does) or pass --master-port");
  }
  return launch;
}

}  // namespace ddp::doctor
