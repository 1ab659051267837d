#pragma once
// Where each task of a --ddp step runs on one node: its GPU, NIC, HCA and CPUs, and the variables that tell
// NCCL, Gloo and libfabric about them.
//
//   per node  load_node_hardware() (topology.hpp): hwloc, once, in the plugin's per-node callback
//   per task  plan_node() from that hardware and what Slurm gave the task: no hwloc, a few microseconds, and the
//             same result in every task of the node, since every input is the same for all of them
//             (the GPU variables Slurm sets appear only in the task, so the plan cannot be made earlier)
//
// Rules (an admin's expectations of `nvidia-smi topo -m`, NCCL and torchrun):
//  * GPUs are NVIDIA PCI display devices in PCI bus order, the order CUDA uses with CUDA_DEVICE_ORDER=PCI_BUS_ID.
//  * Tasks = GPUs: task r gets the r-th GPU. Fewer tasks: one GPU each, spread over the GPUs' CPU localities
//    (sockets) in turn, like Slurm's default block:cyclic task distribution, and within a socket over the GPUs'
//    closest NICs, so tasks get separate cores first and separate NICs next. More tasks: tasks share GPUs
//    round-robin, task r on GPU r mod G, so each GPU serves L/G tasks.
//  * CUDA_VISIBLE_DEVICES is the same in every task of the node: the tasks' GPUs in local-rank order, then the
//    step's other GPUs. A task's own GPU is therefore cuda:(LOCAL_RANK mod device_count()), which is what
//    torchrun scripts select with torch.cuda.set_device(LOCAL_RANK), and NCCL still sees every GPU for its
//    NVLink and PCIe paths.
//  * CPUs: a task's CPUs come from the cores local to its GPU (the GPU's non-I/O hwloc ancestor) that Slurm
//    gave the step; tasks whose GPUs have the same local cores share them out as whole cores, in contiguous
//    blocks of core order. Only with fewer cores than tasks do CPUs of one core go to different tasks, and only
//    with fewer CPUs than tasks do tasks share CPUs. When Slurm gave the step none of a GPU's local cores, its
//    tasks take from all of the step's cores. Tasks without a GPU split all of the step's cores the same way.
//    Where one GPU's local cores contain others' (a GPU local to the whole machine beside GPUs local to
//    sockets), the narrower ones are served first but leave the wider one's tasks their share.
//  * NIC and HCA: the GPU's closest (see Closeness), from NodeHardware; a task without GPU gets the ones
//    closest to the NUMA node of its first CPU. A node without NVIDIA GPUs gets CPU binding and a NIC, no error.
//    The socket interface actually exported is chosen on the running system (netif.hpp).
//  * Slurm's --gpu-bind gives each task its own SLURM_STEP_GPUS; tasks then plan from different inputs and
//    their plans need not agree. --ddp-bind=closest replaces --gpu-bind; do not combine them.
#include <sys/types.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "topology.hpp"

namespace ddp {

// The GPUs Slurm gave the step on this node, in the numbering it uses.
//  * SLURM_STEP_GPUS always holds device numbers: N of /dev/nvidiaN, on the whole node.
//  * CUDA_VISIBLE_DEVICES, set by gres/gpu in the same loop, holds the same numbers, except under
//    ConstrainDevices=yes, where the task's cgroup lets it open only the allocated /dev/nvidiaN, CUDA counts
//    only those, and Slurm writes 0..n-1 instead. So the two differ exactly when the task's GPU indices are
//    cgroup-local. (They can only agree under ConstrainDevices when the allocated devices are 0..n-1, where
//    both numberings name the same GPUs.)
struct GpuAllocation {
  bool whole_node = true;                // Slurm named no GPUs (no gres/gpu here): the step may use them all
  std::vector<unsigned> device_numbers;  // when !whole_node: the /dev/nvidiaN numbers Slurm allocated
  bool cgroup_local = false;             // the task sees only those GPUs, counted from 0 in PCI bus order
};

// From the task's environment as Slurm left it (nullopt: unset). SLURM_STEP_GPUS unset, empty or
// "NoDevFiles" (gres without device files) means whole_node. Throws ddp::Error on malformed lists.
GpuAllocation gpu_allocation_from_slurm(const std::optional<std::string>& slurm_step_gpus,
                                        const std::optional<std::string>& cuda_visible_devices);

struct PlanRequest {
  unsigned tasks = 1;  // tasks of the step on this node
  GpuAllocation gpus;
  std::optional<std::vector<unsigned>> allowed_cpus;  // OS CPU ids Slurm gave the step; nullopt: every CPU
};

struct TaskPlacement {
  std::optional<DeviceIndex> gpu;  // into NodeHardware::gpus
  unsigned cuda_index = 0;         // with a GPU: it is cuda:<cuda_index> in the task
  std::optional<DeviceIndex> nic;  // into NodeHardware::nets
  std::optional<Closeness> nic_closeness;
  std::optional<DeviceIndex> hca;  // into NodeHardware::rdma
  std::optional<Closeness> hca_closeness;
  // The GPU has an EFA device under its own host bridge, the PCIe peer-to-peer path GPUDirect RDMA needs.
  // AWS builds that only into instances whose EFA does RDMA read (p4d, p4de, p5); g4dn's EFA sits under
  // another host bridge and does not, and libfabric fails when told to use device RDMA that is not there.
  bool efa_device_rdma = false;
  std::vector<unsigned> cpus;  // OS CPU ids, sorted, never empty
};

struct NodePlan {
  std::string rule;                       // the rule that applied, one line, for ddp-topo and --ddp-verbose
  std::vector<DeviceIndex> visible_gpus;  // CUDA order of the tasks: into NodeHardware::gpus
  std::string cuda_visible_devices;       // visible_gpus in the numbering the task's CUDA uses; empty: no GPU
  // "=mlx5_0,mlx5_1": every InfiniBand and RoCE HCA, exact names ("mlx5_1" alone would also match mlx5_10).
  // All of them, not the task's closest: NCCL ranks GPU-NIC paths itself and pinning one HCA per rank turns
  // off its multi-rail and PXN paths; the list keeps it off EFA and other RDMA devices. Empty: none.
  std::string nccl_ib_hca;
  bool efa = false;                  // the node has EFA devices: libfabric's efa provider carries NCCL's traffic
  std::vector<TaskPlacement> tasks;  // by local rank
};

// Throws ddp::Error for no tasks, a CPU the topology lacks, or a GPU device number the node lacks.
NodePlan plan_node(const NodeHardware& hw, const PlanRequest& request);

// OS CPU ids of Slurm's core ids (S_STEP_ALLOC_CORES, after parse_id_list), in Slurm's numbering: hwloc's
// logical core order. Throws ddp::Error naming a core the node lacks.
std::vector<unsigned> cpus_of_cores(const NodeHardware& hw, const std::vector<unsigned>& core_ids);

using EnvPairs = std::vector<std::pair<std::string, std::string>>;

// What task `local_rank` exports: CUDA_VISIBLE_DEVICES with CUDA_DEVICE_ORDER=PCI_BUS_ID, NCCL_SOCKET_IFNAME
// and GLOO_SOCKET_IFNAME (when `socket_interface` is not empty; see netif.hpp), NCCL_IB_HCA, and on EFA nodes
// FI_PROVIDER=efa, FI_EFA_FORK_SAFE=1 (PyTorch's data loaders fork) and FI_EFA_USE_DEVICE_RDMA=1 where the
// task's GPU supports it. Whether a value the user set wins is the caller's policy (task_env.hpp).
EnvPairs binding_env(const NodePlan& plan, unsigned local_rank, const std::string& socket_interface);

// Binds `pid` (0: the caller) to `cpus` as far as the process may use them (its sched_getaffinity mask, which
// Slurm's cgroup and affinity step set), and returns the CPUs bound. Throws ddp::Error when none of `cpus`
// is allowed, instead of binding to an empty or foreign set.
std::vector<unsigned> apply_cpu_binding(pid_t pid, const std::vector<unsigned>& cpus);

}  // namespace ddp
