#include "ddp_runtime/training/stop_request.hpp"

#include <atomic>
#include <csignal>
#include <cstring>
#include <initializer_list>

namespace ddp::runtime {
namespace {

std::atomic<int> first_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs a lock-free flag");

void on_signal(int signal) {
  int none = 0;
  if (first_signal.compare_exchange_strong(none, signal) || signal != SIGINT) return;
  // Ctrl-C again: the user will not wait for the step boundary (a rank stuck in its rendezvous, say).
  std::signal(SIGINT, SIG_DFL);
  std::raise(SIGINT);
}

}  // namespace

void install_signal_handlers() {
  struct sigaction action;
  std::memset(&action, 0, sizeof action);
  action.sa_handler = on_signal;
  action.sa_flags = SA_RESTART;
  sigemptyset(&action.sa_mask);
  for (const int signal : {SIGUSR2, SIGTERM, SIGINT}) sigaction(signal, &action, nullptr);
  // A write to a peer that died must fail with EPIPE, which the collective reports, rather than kill this rank
  // without a word (Python, and so Python DDP, ignores SIGPIPE too).
  action.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &action, nullptr);
}

bool stop_requested() { return first_signal.load(std::memory_order_relaxed) != 0; }

const char* stop_signal_name() {
  switch (first_signal.load(std::memory_order_relaxed)) {
    case SIGUSR2: return "SIGUSR2";
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    default: return "";
  }
}

}  // namespace ddp::runtime
