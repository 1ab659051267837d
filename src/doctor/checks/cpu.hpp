#pragma once
// CPU cores a task may run on against what it will start: data-loader workers and OpenMP threads.
#include <optional>
#include <string>

#include "doctor/checks/check.hpp"

namespace ddp::doctor {

// Cores in this process's affinity mask (what Slurm's cgroup and binding left it), at least 1.
unsigned usable_cores();

// cpu.cores: WARN when `workers` data-loader processes plus the training process do not each get a core.
CheckResult check_cores(unsigned cores, std::optional<unsigned> workers);
// cpu.omp_threads: WARN when unset (every rank starts one thread per core of the node) or above the cores the
// task may use; FAIL when it is not a positive whole number (libgomp then ignores it).
CheckResult check_omp_threads(const std::optional<std::string>& omp_num_threads, unsigned cores);

}  // namespace ddp::doctor
