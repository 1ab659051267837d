#include "doctor/checks/cpu.hpp"

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_support.hpp"

namespace ddp::doctor {
namespace {

using testing::contains;

TEST(Cpu, UsableCoresFollowTheAffinityMask) {
  // In a child, so that narrowing the mask leaves the test process alone.
  const pid_t child = fork();
  if (child == 0) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(0, &one);
    if (sched_setaffinity(0, sizeof one, &one) != 0) _exit(3);
    _exit(usable_cores() == 1 ? 0 : 1);
  }
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_EQ(WEXITSTATUS(status), 0);
  cpu_set_t mine;
  sched_getaffinity(0, sizeof mine, &mine);
  EXPECT_EQ(usable_cores(), static_cast<unsigned>(CPU_COUNT(&mine)));
}

TEST(Cpu, WorkersPlusTheTrainingProcessNeedACoreEach) {
  EXPECT_EQ(check_cores(8, std::nullopt).status, Status::Ok);
  EXPECT_EQ(check_cores(8, 7u).status, Status::Ok);
  const CheckResult crowded = check_cores(4, 8u);
  EXPECT_EQ(crowded.status, Status::Warn);
  EXPECT_EQ(crowded.threshold, ">= 9 (8 workers + 1)");
  EXPECT_TRUE(contains(crowded.detail, "--cpus-per-task=9"));
}

TEST(Cpu, OmpThreadsUnsetTooManyOrMalformed) {
  EXPECT_EQ(check_omp_threads(std::nullopt, 8).status, Status::Warn);
  EXPECT_EQ(check_omp_threads(std::string("4"), 8).status, Status::Ok);
  EXPECT_EQ(check_omp_threads(std::string("8,2"), 8).status, Status::Ok);  // nested levels: outer one counts
  const CheckResult many = check_omp_threads(std::string("16"), 8);
  EXPECT_EQ(many.status, Status::Warn);
  EXPECT_TRUE(contains(many.detail, "OMP_NUM_THREADS=8"));
  EXPECT_EQ(check_omp_threads(std::string("0"), 8).status, Status::Fail);
  EXPECT_EQ(check_omp_threads(std::string("four"), 8).status, Status::Fail);
}

}  // namespace
}  // namespace ddp::doctor
