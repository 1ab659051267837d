// The signals ddp-train handles: SIGUSR2, SIGTERM and SIGINT ask for a snapshot and a stop (the first one is named);
// SIGPIPE must not end a rank whose peer died mid-send (seen on the test cluster: the surviving rank ended "Broken
// pipe", with no message). A second SIGINT ending the process is checked on ddp-train itself (ddp_train_test.cpp).
#include <gtest/gtest.h>

#include <csignal>
#include <string>

#include "ddp_runtime/training/stop_request.hpp"

namespace ddp::runtime {
namespace {

TEST(SignalHandlers, Sigusr2SigtermAndSigintRequestAStopAndSigpipeIsIgnored) {
  install_signal_handlers();
  EXPECT_FALSE(stop_requested());
  EXPECT_EQ(std::string(stop_signal_name()), "");
  ASSERT_EQ(raise(SIGUSR2), 0);
  EXPECT_TRUE(stop_requested());
  ASSERT_EQ(raise(SIGTERM), 0);  // without the handler, this ends the test binary; Slurm may send it twice
  ASSERT_EQ(raise(SIGTERM), 0);
  EXPECT_EQ(std::string(stop_signal_name()), "SIGUSR2") << "the first request is the one named";
  for (const int signal : {SIGUSR2, SIGTERM, SIGINT}) {
    struct sigaction current = {};
    ASSERT_EQ(sigaction(signal, nullptr, &current), 0);
    EXPECT_NE(current.sa_handler, SIG_DFL) << signal;
    EXPECT_TRUE(current.sa_flags & SA_RESTART) << "a signal must not break the collectives' blocking calls";
  }
  ASSERT_EQ(raise(SIGPIPE), 0);  // without the handler, this ends the test binary
  struct sigaction current = {};
  ASSERT_EQ(sigaction(SIGPIPE, nullptr, &current), 0);
  EXPECT_EQ(current.sa_handler, SIG_IGN);
}

}  // namespace
}  // namespace ddp::runtime
