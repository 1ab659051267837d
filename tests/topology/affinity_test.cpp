// Binds this test process itself, within what it may use, and puts its mask back afterwards.
#include <gtest/gtest.h>
#include <sched.h>

#include "core/error.hpp"
#include "topology/binding.hpp"

namespace ddp {
namespace {

void set_cpus(const std::vector<unsigned>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (unsigned cpu : cpus) CPU_SET(cpu, &set);
  ASSERT_EQ(sched_setaffinity(0, sizeof set, &set), 0);
}

std::vector<unsigned> current_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  EXPECT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  std::vector<unsigned> cpus;
  for (unsigned cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus;
}

class Affinity : public testing::Test {
 protected:
  void SetUp() override { original_ = current_cpus(); }
  // apply_cpu_binding never widens a mask, so the original one is put back directly.
  void TearDown() override { set_cpus(original_); }
  std::vector<unsigned> original_;
};

TEST_F(Affinity, BindsToTheRequestedCpusThatAreAllowed) {
  // CPU 65000 is not this machine's: it is dropped, not an error, as long as an allowed one remains.
  const std::vector<unsigned> bound = apply_cpu_binding(0, {65000, original_.front()});
  EXPECT_EQ(bound, std::vector<unsigned>{original_.front()});
  EXPECT_EQ(current_cpus(), std::vector<unsigned>{original_.front()});
}

TEST_F(Affinity, StaysWithinTheCurrentMask) {
  if (original_.size() < 2) GTEST_SKIP() << "needs two CPUs";
  apply_cpu_binding(0, {original_[0]});
  // original_[1] is no longer allowed: the binding is refused and the mask left as it was.
  try {
    apply_cpu_binding(0, {original_[1]});
    ADD_FAILURE() << "bound outside the allowed CPUs";
  } catch (const Error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("none of the task's CPUs " + std::to_string(original_[1])), std::string::npos) << message;
    EXPECT_NE(message.find("--ddp-bind=none"), std::string::npos) << message;
  }
  EXPECT_EQ(current_cpus(), std::vector<unsigned>{original_[0]});
}

TEST_F(Affinity, AnEmptyRequestIsAnErrorNotAnEmptyMask) {
  EXPECT_THROW(apply_cpu_binding(0, {}), Error);
  EXPECT_EQ(current_cpus(), original_);
}

}  // namespace
}  // namespace ddp
