#pragma once
// The catalogue of ddp-doctor's checks. Every result carries the stable dotted name of one of these entries (scripts
// match on it) and only those: make_result and skipped take an entry, not a string. An entry says where the check
// runs, what it checks and which option sets its threshold; `ddp-doctor --list-checks` prints the table and
// docs/doctor-checks.md holds it (a test compares the two).
#include <string>
#include <vector>

namespace ddp::doctor {

// Which part of a run makes a check's results.
enum class Where {
  Node,         // every node: inside slurmstepd for `srun --ddp-check`, and ddp-doctor's first task on the node
  NodeLeader,   // ddp-doctor's first task on each node
  EveryTask,    // every task of ddp-doctor
  RankZero,     // ddp-doctor's rank 0, about the whole run
  AcrossNodes,  // between ddp-doctor's nodes, over the network, once the ranks have met
};
const char* to_string(Where where);

struct CheckInfo {
  const char* name;  // e.g. "net.interface"
  Where where;
  const char* what;              // what it checks, in one line
  const char* threshold_option;  // the ddp-doctor option that moves its threshold; "" where none does
};

// Every check, one row each, in the order --list-checks prints them: CHECK(constant, name, where, what it checks,
// threshold option). This is the only list: the constants below (checks::kName, which make_result takes), catalogue(),
// `ddp-doctor --list-checks` and, through a test, docs/doctor-checks.md all come from it. A row's `where` is also
// where its results may be made: the runner refuses a result from any other place (allowed_at, ran_at).
#define DDP_DOCTOR_CHECKS(CHECK)                                                                                       \
  /* Node (run_node_checks: no network traffic, no child process, no exception; well under a millisecond). */          \
  CHECK(kMasterAddr, "net.master_addr", Node, "MASTER_ADDR resolves", "")                                              \
  CHECK(kInterface, "net.interface", Node, "the tasks' socket interface exists, is up and has an address", "")         \
  CHECK(kLinkSpeed, "net.link_speed", Node, "the link speed of that interface", "--min-net-gbps")                      \
  CHECK(kGpuVisible, "gpu.visible", Node,                                                                              \
        "the GPUs the task may use exist (CUDA_VISIBLE_DEVICES, ROCR_VISIBLE_DEVICES); checked on every task", "")     \
  CHECK(kGpuDriverBound, "gpu.driver_bound", Node, "every GPU on the PCI bus is bound to its driver", "")              \
  CHECK(kStorageDir, "storage.dir", Node, "the snapshot directory is usable under srun --ddp's rules", "")             \
  CHECK(kStorageFree, "storage.free", Node, "free space for the snapshots", "--snapshot-size")                         \
  CHECK(kStorageDevice, "storage.device", Node, "the snapshot directory's device: SSD or shared, not tmpfs or a disk", \
        "")                                                                                                            \
  CHECK(kNodeChecks, "node.checks", Node, "the node checks themselves ran (FAIL: why not)", "")                        \
  /* NodeLeader. */                                                                                                    \
  CHECK(kContainerRuntime, "container.runtime", NodeLeader,                                                            \
        "the container runtime, and whether srun --ddp's variables and snapshot mount reached the task", "")           \
  CHECK(kContainerSnapshotDir, "container.snapshot_dir", NodeLeader,                                                   \
        "the snapshot directory srun --ddp prepared is there in the container", "")                                    \
  CHECK(kContainerShm, "container.shm", NodeLeader, "the size of /dev/shm (NCCL and data loaders use it)", "")         \
  CHECK(kGpuDriver, "gpu.driver", NodeLeader,                                                                          \
        "the GPU driver's library (NVML, ROCm SMI) loads and sees the node's GPUs", "")                                \
  CHECK(kGpuMemory, "gpu.memory", NodeLeader, "no GPU's memory is mostly taken already", "")                           \
  CHECK(kTopoGpuNic, "topo.gpu_nic", NodeLeader, "each GPU has a network device near it (same PCIe switch or socket)", \
        "")                                                                                                            \
  CHECK(kTopoPlan, "topo.plan", NodeLeader, "srun --ddp's binding plan for the node's tasks (GPU, NIC, cores)", "")    \
  CHECK(kStorageWriteBw, "storage.write_bw", NodeLeader, "write bandwidth into the snapshot directory",                \
        "--min-disk-mbps")                                                                                             \
  CHECK(kDataDir, "data.dir", NodeLeader, "the --data-dir directory is readable", "")                                  \
  CHECK(kDataDevice, "data.device", NodeLeader, "the --data-dir directory's device", "")                               \
  CHECK(kNodeBlas, "node.blas", NodeLeader,                                                                            \
        "OpenBLAS's kernels use the CPU's AVX2 where it has it (OPENBLAS_CORETYPE)", "")                               \
  CHECK(kNodeCompute, "node.compute", NodeLeader, "GEMM speed, against the median of the nodes",                       \
        "--straggler-threshold")                                                                                       \
  CHECK(kNodeMemoryBw, "node.memory_bw", NodeLeader, "memory bandwidth, against the median of the nodes",              \
        "--straggler-threshold")                                                                                       \
  /* EveryTask. */                                                                                                     \
  CHECK(kCpuCores, "cpu.cores", EveryTask, "the task's cores, for its data-loader workers", "--workers")               \
  CHECK(kOmpThreads, "cpu.omp_threads", EveryTask, "OMP_NUM_THREADS is set and within the task's cores", "")           \
  CHECK(kExchange, "exchange", EveryTask, "the run's exchanges between ranks ended (FAIL: a rank lost or late)",       \
        "--timeout")                                                                                                   \
  /* RankZero. */                                                                                                      \
  CHECK(kMasterPort, "net.master_port", RankZero, "rank 0's store listens on MASTER_PORT and every rank reached it",   \
        "--timeout")                                                                                                   \
  CHECK(kRendezvous, "net.rendezvous", RankZero,                                                                       \
        "MASTER_ADDR is an address of rank 0's node that the other nodes can use", "")                                 \
  CHECK(kJobRdma, "job.rdma", RankZero,                                                                                \
        "every node has the same RDMA ports: names, link layer, state, and for RoCE the GID kinds by index", "")       \
  CHECK(kJobNcclIbHca, "job.nccl_ib_hca", RankZero, "NCCL_IB_HCA is the same on every node", "")                       \
  CHECK(kJobInterface, "job.interface", RankZero, "every node's socket interface for Gloo and NCCL has the same name", \
        "")                                                                                                            \
  CHECK(kJobMasterAddr, "job.master_addr", RankZero, "MASTER_ADDR resolves to the same address on every node", "")     \
  CHECK(kJobPortRange, "job.port_range", RankZero,                                                                     \
        "MASTER_PORT is outside every node's ephemeral range (net.ipv4.ip_local_port_range)", "")                      \
  /* AcrossNodes. */                                                                                                   \
  CHECK(kClockOffset, "clock.offset", AcrossNodes, "each node's clock against rank 0's", "--max-clock-ms")             \
  CHECK(kStorageShared, "storage.shared", AcrossNodes, "every node sees the others' files in the snapshot directory",  \
        "")                                                                                                            \
  CHECK(kStorageLocks, "storage.locks", AcrossNodes,                                                                   \
        "a lock rank 0 holds on a file in the snapshot directory holds on every node", "")                             \
  CHECK(kLinkBandwidth, "net.p2p_bw", AcrossNodes, "bandwidth from each node to the next, over Gloo's transport",      \
        "--min-net-gbps")                                                                                              \
  CHECK(kLinkRtt, "net.p2p_rtt", AcrossNodes, "round trip from each node to the next", "--max-rtt-us")                 \
  CHECK(kAllreduceGloo, "allreduce.gloo", AcrossNodes, "all-reduce over Gloo: every sum right, and its bus bandwidth", \
        "")                                                                                                            \
  CHECK(kAllreduceNccl, "allreduce.nccl", AcrossNodes,                                                                 \
        "all-reduce over NCCL (where built with CUDA): every sum right, and its bus bandwidth", "")

namespace checks {
#define DDP_DOCTOR_DECLARE_CHECK(constant, name, where, what, option) \
  inline constexpr CheckInfo constant{name, Where::where, what, option};
DDP_DOCTOR_CHECKS(DDP_DOCTOR_DECLARE_CHECK)
#undef DDP_DOCTOR_DECLARE_CHECK
}  // namespace checks

// Every entry above, in this order.
const std::vector<const CheckInfo*>& catalogue();

// The entry named `name`; nullptr when there is none.
const CheckInfo* find_check(const std::string& name);

// The catalogue as `ddp-doctor --list-checks` prints it: a header, then one line per check.
std::string catalogue_text();

}  // namespace ddp::doctor
