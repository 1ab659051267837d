// The signals ddp-train handles: SIGUSR2 asks for a snapshot and a stop; SIGPIPE must not end a rank whose
// peer died mid-send (seen on the test cluster: the surviving rank ended "Broken pipe", with no message).
#include <gtest/gtest.h>

#include <csignal>

#include "ddp_runtime/stop_request.hpp"

namespace ddp::runtime {
namespace {

TEST(SignalHandlers, Sigusr2RequestsAStopAndSigpipeIsIgnored) {
  install_signal_handlers();
  EXPECT_FALSE(stop_requested());
  ASSERT_EQ(raise(SIGUSR2), 0);
  EXPECT_TRUE(stop_requested());
  ASSERT_EQ(raise(SIGPIPE), 0);  // without the handler, this ends the test binary
  struct sigaction current = {};
  ASSERT_EQ(sigaction(SIGPIPE, nullptr, &current), 0);
  EXPECT_EQ(current.sa_handler, SIG_IGN);
}

}  // namespace
}  // namespace ddp::runtime
