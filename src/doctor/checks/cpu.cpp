#include "doctor/checks/cpu.hpp"

#include <sched.h>

#include "base/parse.hpp"
#include "core/launch.hpp"

namespace ddp::doctor {

unsigned usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
  const int count = CPU_COUNT(&set);
  return count > 0 ? static_cast<unsigned>(count) : 1;
}

CheckResult check_cores(unsigned cores, std::optional<unsigned> workers) {
  const std::string value = std::to_string(cores) + " core(s)";
  if (!workers) return make_result(checks::kCpuCores, Status::Ok, value, "", "--workers N checks data-loader workers");
  const unsigned needed = *workers + 1;
  const std::string threshold = ">= " + std::to_string(needed) + " (" + std::to_string(*workers) + " workers + 1)";
  if (cores >= needed) return make_result(checks::kCpuCores, Status::Ok, value, threshold);
  return make_result(checks::kCpuCores, Status::Warn, value, threshold,
                     std::to_string(*workers) + " data-loader workers and the training process share " + value +
                         ": ask for --cpus-per-task=" + std::to_string(needed) + " or use fewer workers");
}

CheckResult check_omp_threads(const std::optional<std::string>& omp_num_threads, unsigned cores) {
  const CheckInfo& check = checks::kOmpThreads;
  const std::string threshold = "1.." + std::to_string(cores);
  if (!omp_num_threads) {
    return make_result(check, Status::Warn, "unset", threshold,
                       "each rank starts one OpenMP thread per core of the node and the ranks fight over them; "
                       "srun --ddp sets it from --cpus-per-task, or export OMP_NUM_THREADS");
  }
  const std::optional<int> threads = outer_thread_count(*omp_num_threads);
  if (!threads) {
    return make_result(check, Status::Fail, quote(*omp_num_threads), threshold,
                       "OMP_NUM_THREADS must be a whole number >= 1; OpenMP ignores this value");
  }
  if (static_cast<unsigned>(*threads) > cores) {
    return make_result(check, Status::Warn, *omp_num_threads, threshold,
                       "more threads than the " + std::to_string(cores) +
                           " core(s) this task may use: they time-slice; set OMP_NUM_THREADS=" + std::to_string(cores));
  }
  return make_result(check, Status::Ok, *omp_num_threads, threshold);
}

}  // namespace ddp::doctor
