#pragma once
// The node as the topology binding sees it: the plan srun --ddp makes for this node's tasks, and GPUs whose
// nearest NIC is across sockets. Built on ddp_topology (hwloc), so it lives in ddp_doctor_topology, outside the
// plugin-facing ddp_doctor.
#include <vector>

#include "core/env.hpp"
#include "doctor/checks/check.hpp"
#include "topology/binding.hpp"

namespace ddp::doctor {

// topo.gpu_nic: WARN naming the GPUs whose closest PCI network device (interface or RDMA device) is in another
// package: their ranks' traffic to other nodes crosses the socket interconnect.
CheckResult check_gpu_nic_closeness(const NodeHardware& hardware);

// topo.plan: the rule and each task's GPU, NIC and CPUs; WARN when no plan can be made.
CheckResult describe_plan(const NodeHardware& hardware, const PlanRequest& request);

// Both, for this machine, with this node's task count and Slurm's GPU variables from `env`
// (LOCAL_WORLD_SIZE, SLURM_STEP_GPUS). A topology hwloc cannot read is a WARN.
std::vector<CheckResult> topology_checks(const EnvLookup& env);

}  // namespace ddp::doctor
