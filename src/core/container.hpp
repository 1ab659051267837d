#pragma once
// Containers between srun --ddp and the program. ddp.so sets the torchrun contract in the task before exec;
// whatever starts after it may change what the program finally sees:
//   - pyxis (a SPANK plugin) imports its container's environment into the task, over any value already there,
//     and for images with PYTORCH_VERSION enroot's pytorch hook puts MASTER_ADDR, MASTER_PORT and WORLD_SIZE
//     into that environment: listed before ddp.so in plugstack.conf, it is harmless; after it, it wins;
//   - ch-run and Slurm's --container (oci.conf) pass the task's environment on; apptainer/singularity exec
//     --cleanenv passes only APPTAINERENV_X (SINGULARITYENV_X) as X.
// So ddp.so also exports DDP_CONTRACT, the values that must reach the program unchanged (the ranks, the
// rendezvous and the snapshot directory it prepared), and APPTAINERENV_DDP_CONTRACT, which survives --cleanenv.
// The programs (ddp-train, ddp-doctor) compare it with what they see and refuse a contract that was cleared or
// replaced, naming the cause and the fix; a snapshot directory the program cannot see is named with the option
// that mounts it into the program's container.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/env.hpp"
#include "core/env_names.hpp"

namespace ddp {

enum class ContainerRuntime { None, Pyxis, Charliecloud, SlurmOci, Apptainer, Unknown };

struct ContainerKind {
  ContainerRuntime runtime;
  const char* name;   // "Charliecloud (ch-run)"
  const char* mount;  // how a node directory is mounted into it: "ch-run -b SRC[:DST]"
};

const ContainerKind& container_kind(ContainerRuntime runtime);

// The container this process runs in, from what each runtime sets inside its containers: CH_RUNNING (ch-run),
// APPTAINER_CONTAINER or SINGULARITY_CONTAINER, SLURM_CONTAINER (srun --container). pyxis sets nothing of its
// own: ddp.so tells its containers by their mount namespace instead (task side). None when no variable says.
ContainerKind container_from_environment(const EnvLookup& env);

// "pyxis: srun --container-mounts=SRC:DST; Charliecloud: ch-run -b SRC[:DST]; ...": every runtime's option,
// for when the runtime is not known.
std::string every_mount_option();

constexpr const char* kContractVariable = vars::kContract;
// The spelling of DDP_CONTRACT that apptainer exec --cleanenv passes into the container as DDP_CONTRACT.
constexpr const char* kCleanEnvContractVariable = vars::kCleanEnvContract;

// The variables whose values DDP_CONTRACT holds, when ddp.so set them: what a rank needs to find its peers and
// its snapshots. Tuning values (OMP_NUM_THREADS, *_SOCKET_IFNAME) are left out: a program may change them.
const std::vector<std::string>& contract_names();

using ContractValues = std::vector<std::pair<std::string, std::string>>;

// "NAME=value NAME=value": values with '%', spaces or control characters written as %XX.
std::string encode_contract(const ContractValues& values);
// Throws ddp::Error for text encode_contract did not write.
ContractValues decode_contract(const std::string& text);

// Throws ddp::Error when DDP_CONTRACT is set and a value it holds did not reach this process: cleared (a clean
// environment, apptainer --cleanenv without --ddp-cleanenv) or replaced (a plugin after ddp.so, pyxis with
// enroot's pytorch hook). The message names the variables, their values, the cause and the fix.
void check_contract(const EnvLookup& env);

// The snapshot directory ddp.so prepared for this task (DDP_CONTRACT's DDP_SNAPSHOT_DIR) must exist in this
// process's view when `dir` is that directory: where it does not, the program runs in a container that does not
// mount it, and whatever it wrote there would be lost with the container. Throws ddp::Error naming the
// container's mount option; a `dir` srun --ddp did not prepare is left to the caller's own checks.
void require_prepared_dir(const std::string& dir, const EnvLookup& env);

// The CPUs ddp.so bound the task to, "0-3,8" (its task_init applies them, then exports them here).
constexpr const char* kCpuBindVariable = vars::kCpuBind;

struct CpuRebinding {
  std::string before;  // the affinity the program found, "0-7"
  std::string after;   // what it is bound to now
};

// A container runtime that resets the CPU affinity of the process it starts undoes the binding ddp.so applied in
// task_init: runc since 1.2 gives it every CPU of the container's cgroup. Binds this process again to DDP_CPU_BIND,
// within the CPUs it may use; nullopt when there was nothing to do (no DDP_CPU_BIND, or the affinity is that set).
// Throws ddp::Error for a DDP_CPU_BIND that is not a CPU list or names none of the CPUs the process may use.
std::optional<CpuRebinding> restore_cpu_binding(const EnvLookup& env);

}  // namespace ddp
