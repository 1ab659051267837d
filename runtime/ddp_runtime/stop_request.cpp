#include "ddp_runtime/stop_request.hpp"

#include <atomic>
#include <csignal>
#include <cstring>

namespace ddp::runtime {
namespace {

std::atomic<bool> requested{false};
static_assert(std::atomic<bool>::is_always_lock_free, "the signal handler needs a lock-free flag");

void on_signal(int) { requested.store(true, std::memory_order_relaxed); }

}  // namespace

void install_signal_handlers() {
  struct sigaction action;
  std::memset(&action, 0, sizeof action);
  action.sa_handler = on_signal;
  action.sa_flags = SA_RESTART;
  sigemptyset(&action.sa_mask);
  sigaction(SIGUSR2, &action, nullptr);
  // A write to a peer that died must fail with EPIPE, which the collective reports, rather than kill this rank
  // without a word (Python, and so Python DDP, ignores SIGPIPE too).
  action.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &action, nullptr);
}

bool stop_requested() { return requested.load(std::memory_order_relaxed); }

}  // namespace ddp::runtime
