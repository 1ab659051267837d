#pragma once
// The names of the environment variables that srun --ddp gives each task and that the launchers, the runtime and
// the doctor read: torchrun's contract with its workers (https://pytorch.org/docs/stable/elastic/run.html) and
// slurm-ddp's own. Each name is written here once; writers, readers and tests use these constants. kTaskVariables
// lists what a task receives, as docs/plugin.md's table does (a test holds the two equal).
namespace ddp::vars {

// torchrun's contract.
inline constexpr char kRank[] = "RANK";
inline constexpr char kLocalRank[] = "LOCAL_RANK";
inline constexpr char kWorldSize[] = "WORLD_SIZE";
inline constexpr char kLocalWorldSize[] = "LOCAL_WORLD_SIZE";
inline constexpr char kNodeRank[] = "NODE_RANK";
inline constexpr char kGroupRank[] = "GROUP_RANK";
inline constexpr char kGroupWorldSize[] = "GROUP_WORLD_SIZE";
inline constexpr char kRoleName[] = "ROLE_NAME";
inline constexpr char kRoleRank[] = "ROLE_RANK";
inline constexpr char kRoleWorldSize[] = "ROLE_WORLD_SIZE";
inline constexpr char kMasterAddr[] = "MASTER_ADDR";
inline constexpr char kMasterPort[] = "MASTER_PORT";
inline constexpr char kRunId[] = "TORCHELASTIC_RUN_ID";
inline constexpr char kRestartCount[] = "TORCHELASTIC_RESTART_COUNT";
inline constexpr char kMaxRestarts[] = "TORCHELASTIC_MAX_RESTARTS";
inline constexpr char kUseAgentStore[] = "TORCHELASTIC_USE_AGENT_STORE";
inline constexpr char kErrorFile[] = "TORCHELASTIC_ERROR_FILE";
// PyTorch's settings that srun --ddp gives a default.
inline constexpr char kOmpNumThreads[] = "OMP_NUM_THREADS";
inline constexpr char kUseLibuv[] = "USE_LIBUV";
inline constexpr char kNcclAsyncErrorHandling[] = "TORCH_NCCL_ASYNC_ERROR_HANDLING";
inline constexpr char kNcclDumpOnTimeout[] = "TORCH_NCCL_DUMP_ON_TIMEOUT";
inline constexpr char kNcclTraceBufferSize[] = "TORCH_NCCL_TRACE_BUFFER_SIZE";
inline constexpr char kNcclDebugInfoTempFile[] = "TORCH_NCCL_DEBUG_INFO_TEMP_FILE";
// The socket interfaces of NCCL and Gloo (binding.hpp sets them, the doctor and the launch read them).
inline constexpr char kNcclSocketIfname[] = "NCCL_SOCKET_IFNAME";
inline constexpr char kGlooSocketIfname[] = "GLOO_SOCKET_IFNAME";
// The RDMA devices NCCL may use: the same on every rank (ddp-doctor's job.nccl_ib_hca).
inline constexpr char kNcclIbHca[] = "NCCL_IB_HCA";
// slurm-ddp's own.
inline constexpr char kBackend[] = "DDP_BACKEND";
inline constexpr char kSnapshotDir[] = "DDP_SNAPSHOT_DIR";
inline constexpr char kRecover[] = "DDP_RECOVER";
inline constexpr char kJoin[] = "DDP_JOIN";
inline constexpr char kJobKey[] = "DDP_JOB_KEY";
inline constexpr char kJobInstance[] = "DDP_JOB_INSTANCE";
inline constexpr char kContract[] = "DDP_CONTRACT";
// The spelling of DDP_CONTRACT that apptainer exec --cleanenv passes into the container as DDP_CONTRACT.
inline constexpr char kCleanEnvContract[] = "APPTAINERENV_DDP_CONTRACT";
inline constexpr char kCpuBind[] = "DDP_CPU_BIND";
inline constexpr char kLogDir[] = "DDP_LOG_DIR";
inline constexpr char kMaxRestartsRequest[] = "DDP_MAX_RESTARTS";
inline constexpr char kRestartAttempt[] = "DDP_RESTART_ATTEMPT";
// ddp-restart's switch for failed nodes left out after a requeue; ddp.so sets it to 0 in a job it starts where the
// admin turned that off (plugstack key remember_bad_nodes=no), also under its job-control name, which --export=NONE
// keeps.
inline constexpr char kRememberBadNodes[] = "DDP_REMEMBER_BAD_NODES";
inline constexpr char kRememberBadNodesCarrier[] = "SLURM_SPANK_DDP_REMEMBER_BAD_NODES";

// What srun --ddp sets in a task (task_env.hpp, step_logs.hpp, container.hpp), in the order of docs/plugin.md's table;
// each unless its row there says when not. The binding's variables (binding.hpp) are listed with the binding.
inline constexpr const char* kTaskVariables[] = {kRank,
                                                 kRoleRank,
                                                 kLocalRank,
                                                 kWorldSize,
                                                 kRoleWorldSize,
                                                 kLocalWorldSize,
                                                 kNodeRank,
                                                 kGroupRank,
                                                 kGroupWorldSize,
                                                 kRoleName,
                                                 kMasterAddr,
                                                 kMasterPort,
                                                 kJobKey,
                                                 kJobInstance,
                                                 kRunId,
                                                 kRestartCount,
                                                 kMaxRestarts,
                                                 kUseAgentStore,
                                                 kBackend,
                                                 kOmpNumThreads,
                                                 kUseLibuv,
                                                 kSnapshotDir,
                                                 kRecover,
                                                 kContract,
                                                 kCleanEnvContract,
                                                 kErrorFile,
                                                 kNcclAsyncErrorHandling,
                                                 kNcclDumpOnTimeout,
                                                 kNcclTraceBufferSize,
                                                 kNcclDebugInfoTempFile};

}  // namespace ddp::vars
