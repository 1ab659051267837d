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

namespace checks {
// Node (run_node_checks: no network traffic, no child process, no exception; well under a millisecond).
inline constexpr CheckInfo kMasterAddr{"net.master_addr", Where::Node, "MASTER_ADDR resolves", ""};
inline constexpr CheckInfo kInterface{"net.interface", Where::Node,
                                      "the tasks' socket interface exists, is up and has an address", ""};
inline constexpr CheckInfo kLinkSpeed{"net.link_speed", Where::Node, "the link speed of that interface",
                                      "--min-net-gbps"};
inline constexpr CheckInfo kGpuVisible{
    "gpu.visible", Where::Node,
    "the GPUs the task may use exist (CUDA_VISIBLE_DEVICES, ROCR_VISIBLE_DEVICES); checked on every task", ""};
inline constexpr CheckInfo kGpuDriverBound{"gpu.driver_bound", Where::Node,
                                           "every GPU on the PCI bus is bound to its driver", ""};
inline constexpr CheckInfo kStorageDir{"storage.dir", Where::Node,
                                       "the snapshot directory is usable under srun --ddp's rules", ""};
inline constexpr CheckInfo kStorageFree{"storage.free", Where::Node, "free space for the snapshots", "--snapshot-size"};
inline constexpr CheckInfo kStorageDevice{"storage.device", Where::Node,
                                          "the snapshot directory's device: SSD or shared, not tmpfs or a disk", ""};
inline constexpr CheckInfo kNodeChecks{"node.checks", Where::Node, "the node checks themselves ran (FAIL: why not)",
                                       ""};
// NodeLeader.
inline constexpr CheckInfo kContainerRuntime{
    "container.runtime", Where::NodeLeader,
    "the container runtime, and whether srun --ddp's variables and snapshot mount reached the task", ""};
inline constexpr CheckInfo kContainerSnapshotDir{"container.snapshot_dir", Where::NodeLeader,
                                                 "the snapshot directory srun --ddp prepared is there in the container",
                                                 ""};
inline constexpr CheckInfo kContainerShm{"container.shm", Where::NodeLeader,
                                         "the size of /dev/shm (NCCL and data loaders use it)", ""};
inline constexpr CheckInfo kGpuDriver{"gpu.driver", Where::NodeLeader,
                                      "the GPU driver's library (NVML, ROCm SMI) loads and sees the node's GPUs", ""};
inline constexpr CheckInfo kGpuMemory{"gpu.memory", Where::NodeLeader, "no GPU's memory is mostly taken already", ""};
inline constexpr CheckInfo kTopoGpuNic{"topo.gpu_nic", Where::NodeLeader,
                                       "each GPU has a network device near it (same PCIe switch or socket)", ""};
inline constexpr CheckInfo kTopoPlan{"topo.plan", Where::NodeLeader,
                                     "srun --ddp's binding plan for the node's tasks (GPU, NIC, cores)", ""};
inline constexpr CheckInfo kStorageWriteBw{"storage.write_bw", Where::NodeLeader,
                                           "write bandwidth into the snapshot directory", "--min-disk-mbps"};
inline constexpr CheckInfo kDataDir{"data.dir", Where::NodeLeader, "the --data-dir directory is readable", ""};
inline constexpr CheckInfo kDataDevice{"data.device", Where::NodeLeader, "the --data-dir directory's device", ""};
inline constexpr CheckInfo kNodeBlas{"node.blas", Where::NodeLeader,
                                     "OpenBLAS's kernels use the CPU's AVX2 where it has it (OPENBLAS_CORETYPE)", ""};
inline constexpr CheckInfo kNodeCompute{"node.compute", Where::NodeLeader,
                                        "GEMM speed, against the median of the nodes", "--straggler-threshold"};
inline constexpr CheckInfo kNodeMemoryBw{"node.memory_bw", Where::NodeLeader,
                                         "memory bandwidth, against the median of the nodes", "--straggler-threshold"};
// EveryTask.
inline constexpr CheckInfo kCpuCores{"cpu.cores", Where::EveryTask, "the task's cores, for its data-loader workers",
                                     "--workers"};
inline constexpr CheckInfo kOmpThreads{"cpu.omp_threads", Where::EveryTask,
                                       "OMP_NUM_THREADS is set and within the task's cores", ""};
inline constexpr CheckInfo kExchange{
    "exchange", Where::EveryTask, "the run's exchanges between ranks ended (FAIL: a rank lost or late)", "--timeout"};
// RankZero.
inline constexpr CheckInfo kMasterPort{"net.master_port", Where::RankZero,
                                       "rank 0's store listens on MASTER_PORT and every rank reached it", "--timeout"};
inline constexpr CheckInfo kRendezvous{"net.rendezvous", Where::RankZero,
                                       "MASTER_ADDR is an address of rank 0's node that the other nodes can use", ""};
// AcrossNodes.
inline constexpr CheckInfo kClockOffset{"clock.offset", Where::AcrossNodes, "each node's clock against rank 0's",
                                        "--max-clock-ms"};
inline constexpr CheckInfo kStorageShared{"storage.shared", Where::AcrossNodes,
                                          "every node sees the others' files in the snapshot directory", ""};
inline constexpr CheckInfo kStorageLocks{"storage.locks", Where::AcrossNodes,
                                         "a lock rank 0 holds on a file in the snapshot directory holds on every node",
                                         ""};
inline constexpr CheckInfo kLinkBandwidth{
    "net.p2p_bw", Where::AcrossNodes, "bandwidth from each node to the next, over Gloo's transport", "--min-net-gbps"};
inline constexpr CheckInfo kLinkRtt{"net.p2p_rtt", Where::AcrossNodes, "round trip from each node to the next",
                                    "--max-rtt-us"};
inline constexpr CheckInfo kAllreduceGloo{"allreduce.gloo", Where::AcrossNodes,
                                          "all-reduce over Gloo: every sum right, and its bus bandwidth", ""};
inline constexpr CheckInfo kAllreduceNccl{"allreduce.nccl", Where::AcrossNodes,
                                          "all-reduce over NCCL (where built with CUDA): every sum right, and its bus "
                                          "bandwidth",
                                          ""};
}  // namespace checks

// Every entry above, in this order.
const std::vector<const CheckInfo*>& catalogue();

// The entry named `name`; nullptr when there is none.
const CheckInfo* find_check(const std::string& name);

// The catalogue as `ddp-doctor --list-checks` prints it: a header, then one line per check.
std::string catalogue_text();

}  // namespace ddp::doctor
