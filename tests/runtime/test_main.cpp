// GoogleTest's main, except when a test re-enters this binary as one rank of a multi-process test.
#include <gtest/gtest.h>

#include <cstdlib>

#include "test_support.hpp"

namespace {

class TestStart : public ::testing::EmptyTestEventListener {
  void OnTestStart(const ::testing::TestInfo&) override { ddp::runtime::testing::test_started(); }
};

}  // namespace

int main(int argc, char** argv) {
  if (const char* worker = std::getenv("RUNTIME_TEST_WORKER")) return ddp::runtime::testing::run_test_worker(worker);
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::UnitTest::GetInstance()->listeners().Append(new TestStart);  // GoogleTest owns it
  return RUN_ALL_TESTS();
}
