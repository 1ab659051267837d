#pragma once
// Where each task of a --ddp step runs on one node: its GPU, NIC, HCA and CPUs, and the variables that tell
// NCCL, Gloo and libfabric about them.
//
//   per node  load_node_hardware() (topology.hpp): hwloc, once, in the plugin's per-node callback
//   per task  plan_node() from that hardware and what Slurm gave the task: no hwloc, tens of microseconds, and the
//             same result in every task of the node, since every input is the same for all of them
//             (the GPU variables Slurm sets appear only in the task, so the plan cannot be made earlier)
//
// Rules, in the order they apply (an admin's expectations of `nvidia-smi topo -m`, `rocm-smi --showtopo`, NCCL/RCCL,
// Slurm and torchrun). Each task's placement carries the rule that decided it (TaskPlacement::gpu_rule, cpu_rule),
// which ddp-topo and --ddp-verbose print.
//  * GPUs: NVIDIA's or AMD's, found and numbered as gpus.hpp says (one vendor per node: the one with more GPUs).
//  * Tasks = GPUs: task r gets the r-th GPU. More tasks: tasks share GPUs round-robin, task r on GPU r mod G, so
//    each GPU serves L/G tasks.
//  * Fewer tasks than GPUs: tasks pick GPUs one after the other, task r the r-th pick. Each pick takes, of the GPUs
//    left, the first by these keys, in order:
//     1. local to the step's CPUs: its CPU locality (the GPU's non-I/O hwloc ancestor) holds a core Slurm gave the
//        step. A partial node (a step of one socket's cores on a shared node, all GPUs visible because gres is
//        counted per job or ConstrainDevices is off) then gets that socket's GPUs before any other, so the task's
//        CPUs and its GPU's host memory traffic stay on one socket.
//     2. spread over sockets: fewest earlier picks in its package, like Slurm's default block:cyclic
//        distribution, so tasks get separate cores and memory first;
//     3. then over the socket's NUMA domains where hwloc puts GPUs in them (SNC, NPS): fewest earlier picks with
//        the same CPU locality;
//     4. its own PCIe path: the farthest from the nearest earlier pick by closeness (PIX < PXB < PHB < NODE...), so
//        tasks sharing a socket use distinct PCIe switches, then distinct host bridges, and do not share the
//        uplink to the CPU while another stays idle (g4dn.metal: 18:00.0 then 35:00.0, not 19:00.0);
//     5. its own NIC: fewest earlier picks with the same closest NIC and RDMA device;
//     6. device order (gpus.hpp: PCI bus order for NVIDIA).
//    The rule a pick is credited with is the first key on which it beat the runner-up.
//  * The GPU list (CUDA_VISIBLE_DEVICES, or ROCR_VISIBLE_DEVICES) is the same in every task of the node: the
//    tasks' GPUs in local-rank order, then the step's other GPUs. A task's own GPU is therefore
//    cuda:(LOCAL_RANK mod device_count()) — ROCm builds of PyTorch call AMD GPUs "cuda" too — which is what
//    torchrun scripts select with torch.cuda.set_device(LOCAL_RANK), and NCCL/RCCL still see every GPU for their
//    NVLink, xGMI and PCIe paths.
//  * CPUs: a task's CPUs come from the cores local to its GPU that Slurm gave the step; tasks whose GPUs have the
//    same local cores share them out as whole cores (below). When Slurm gave the step none of a GPU's local cores,
//    its tasks take from all of the step's cores, and the placement carries a note saying why its GPU is remote:
//    a plan is always made, never an error. Tasks without a GPU share all of the step's cores. Where one GPU's
//    local cores contain others' (a GPU local to the whole machine beside GPUs local to sockets), the narrower ones
//    are served first but leave the wider one's tasks their share.
//  * Sharing k tasks' cores out (every plan, with or without GPUs), by the NUMA domains (distinct CPU sets of NUMA
//    nodes; memory-only nodes such as KNL's MCDRAM or CXL add none) that the cores lie in:
//     - k a multiple of the D domains: k/D tasks per domain, each with whole cores of that domain only;
//     - k a divisor of D: D/k whole consecutive domains per task (domains of one package are consecutive);
//     - otherwise: contiguous blocks of whole cores whose sizes differ by at most one, placed so that they cross
//       as few domain boundaries as possible (KNL SNC-4 has domains of 18, 18, 16 and 16 cores: 4 equal blocks
//       of 17 would put tasks 1-3 across boundaries; one task per domain is the plan).
//    The CPU DDP path's all-reduce is memory-bound, and OMP threads of one task should share one memory controller.
//    Only with fewer cores than tasks do CPUs of one core go to different tasks, and only with fewer CPUs than
//    tasks do tasks share CPUs.
//  * NIC and HCA: the GPU's closest (see Closeness), from NodeHardware; a task without GPU gets the ones closest
//    to the NUMA node of its first CPU. A node without GPUs gets CPU binding and a NIC, no error. The socket
//    interface actually exported is chosen on the running system (netif.hpp). RCCL reads the same NCCL_*
//    variables as NCCL.
//  * Slurm's --gpu-bind gives each task its own SLURM_STEP_GPUS; tasks then plan from different inputs and
//    their plans need not agree. --ddp-bind=closest replaces --gpu-bind; do not combine them.
#include <sys/types.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "topology/topology.hpp"

namespace ddp {

// The GPUs Slurm gave the step on this node, in the numbering it uses.
//  * SLURM_STEP_GPUS always holds node-wide numbers, read here as Gpu::device_number: N of /dev/nvidiaN, or ROCm
//    SMI's index of an AMD GPU. (Since Slurm 21.08 it is the GPU's position in slurmd's gres list, sorted by
//    File= and, with AutoDetect, by PCI bus order; the two readings agree where the driver's device numbers
//    follow PCI bus order, the usual case.)
//  * CUDA_VISIBLE_DEVICES or ROCR_VISIBLE_DEVICES, set by gres/gpu in the same loop, holds the same numbers,
//    except under ConstrainDevices=yes, where the task's cgroup lets it open only the allocated devices, the
//    runtime counts only those, and Slurm writes 0..n-1 instead. So the two differ exactly when the task's GPU
//    indices are cgroup-local. (They can only agree under ConstrainDevices when the allocated devices are
//    0..n-1, where both numberings name the same GPUs.)
struct GpuAllocation {
  bool whole_node = true;                // Slurm named no GPUs (no gres/gpu here): the step may use them all
  std::vector<unsigned> device_numbers;  // when !whole_node: the device numbers Slurm allocated
  bool cgroup_local = false;             // the task sees only those GPUs, counted from 0 in the runtime's order
};

// From the task's environment as Slurm left it (nullopt: unset); `visible_devices` is the node's GPU vendor's
// variable, named `visible_devices_name` (visible_devices_variable in gpus.hpp). SLURM_STEP_GPUS unset, empty or
// "NoDevFiles" (gres without device files) means whole_node. Throws ddp::Error on malformed lists.
GpuAllocation gpu_allocation_from_slurm(const std::optional<std::string>& slurm_step_gpus,
                                        const std::optional<std::string>& visible_devices,
                                        const std::string& visible_devices_name = "CUDA_VISIBLE_DEVICES");

struct PlanRequest {
  unsigned tasks = 1;  // tasks of the step on this node
  GpuAllocation gpus;
  std::optional<std::vector<unsigned>> allowed_cpus;  // OS CPU ids Slurm gave the step; nullopt: every CPU
};

struct TaskPlacement {
  std::optional<DeviceIndex> gpu;  // into NodeHardware::gpus
  unsigned cuda_index = 0;         // with a GPU: it is cuda:<cuda_index> in the task (ROCm's PyTorch too)
  std::string gpu_rule;            // the rule that chose the GPU; empty without one
  std::string cpu_rule;            // the rule that chose the CPUs
  std::string note;                // what the plan could not do well, and why (a GPU remote from the task's CPUs)
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
  std::vector<DeviceIndex> visible_gpus;  // the tasks' device order: into NodeHardware::gpus
  std::string visible_devices_variable;   // CUDA_VISIBLE_DEVICES or ROCR_VISIBLE_DEVICES; empty: no GPU
  std::string visible_devices;            // visible_gpus in the numbering the task's runtime uses
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

// What task `local_rank` exports: CUDA_VISIBLE_DEVICES with CUDA_DEVICE_ORDER=PCI_BUS_ID, or on AMD nodes
// ROCR_VISIBLE_DEVICES with HIP_VISIBLE_DEVICES=0..n-1 (HIP counts what ROCr exposes; it would otherwise apply
// a CUDA_VISIBLE_DEVICES that Slurm wrote for every vendor on top of ROCr's list, which hides GPUs), NCCL_SOCKET_IFNAME
// and GLOO_SOCKET_IFNAME (when `socket_interface` is not empty; see netif.hpp), NCCL_IB_HCA, and on EFA nodes
// FI_PROVIDER=efa, FI_EFA_FORK_SAFE=1 (PyTorch's data loaders fork) and FI_EFA_USE_DEVICE_RDMA=1 where the
// task's GPU supports it. Whether a value the user set wins is the caller's policy (task_env.hpp).
EnvPairs binding_env(const NodePlan& plan, unsigned local_rank, const std::string& socket_interface);

// Binds `pid` (0: the caller) to `cpus` as far as the process may use them (its sched_getaffinity mask, which
// Slurm's cgroup and affinity step set), and returns the CPUs bound. Throws ddp::Error when none of `cpus`
// is allowed, instead of binding to an empty or foreign set.
std::vector<unsigned> apply_cpu_binding(pid_t pid, const std::vector<unsigned>& cpus);

}  // namespace ddp
