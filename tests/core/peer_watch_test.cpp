// PeerWatch: a peer that ends is seen, one that is stopped is not, and peers that cannot be told apart from a reused
// PID or that live on another kernel or in another PID namespace are not watched.
#include "base/peer_watch.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>
#include <vector>

namespace ddp {
namespace {

// A child that waits to be killed; killed and reaped with the object.
class Child {
 public:
  Child() : pid_(fork()) {
    if (pid_ == 0) {
      for (;;) pause();
    }
  }
  ~Child() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  pid_t pid() const { return pid_; }
  ProcessIdentity identity() const {
    ProcessIdentity identity = identity_of_this_process();
    identity.pid = pid_;
    identity.start_ticks = process_start_ticks(pid_);
    return identity;
  }

 private:
  pid_t pid_;
};

// ended() within a few seconds, as a watchdog polling it would see it.
int ended_within(const PeerWatch& watch, std::chrono::seconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  int rank = watch.ended();
  while (rank < 0 && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    rank = watch.ended();
  }
  return rank;
}

TEST(PeerWatch, ThisProcessIsNamedByItsKernelNamespacePidAndStartTime) {
  const ProcessIdentity me = identity_of_this_process();
  EXPECT_EQ(std::string(me.boot_id.data()).size(), 36u) << me.boot_id.data();
  EXPECT_NE(me.pid_ns_ino, 0u);
  EXPECT_EQ(me.pid, getpid());
  EXPECT_GT(me.start_ticks, 0u);
  EXPECT_EQ(me.start_ticks, process_start_ticks(getpid()));
  EXPECT_EQ(process_start_ticks(-1), 0u) << "no such process";
}

TEST(PeerWatch, APeerThatEndsIsSeenAndAStoppedOneIsNot) {
  const Child stopped;
  const Child killed;
  ASSERT_GT(stopped.pid(), 0);
  ASSERT_GT(killed.pid(), 0);
  const PeerWatch watch({identity_of_this_process(), stopped.identity(), killed.identity()}, 0);
  ASSERT_EQ(watch.watched(), (std::vector<int>{1, 2})) << "this kernel has no pidfd_open?";
  EXPECT_EQ(watch.ended(), -1);
  kill(stopped.pid(), SIGSTOP);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(watch.ended(), -1) << "a stopped peer has not ended";
  kill(killed.pid(), SIGKILL);  // not reaped yet: ended all the same
  EXPECT_EQ(ended_within(watch, std::chrono::seconds(10)), 2);
  kill(stopped.pid(), SIGCONT);
}

TEST(PeerWatch, APeerItCannotBeSureOfIsNotWatched) {
  const Child child;
  ASSERT_GT(child.pid(), 0);
  const ProcessIdentity me = identity_of_this_process();
  ProcessIdentity reused = child.identity();
  reused.start_ticks += 1;  // the PID now names a process started at another time
  ProcessIdentity other_kernel = child.identity();
  other_kernel.boot_id[0] = other_kernel.boot_id[0] == 'a' ? 'b' : 'a';
  ProcessIdentity other_namespace = child.identity();
  other_namespace.pid_ns_ino += 1;
  ProcessIdentity unknown_start = child.identity();
  unknown_start.start_ticks = 0;
  const PeerWatch watch({me, reused, other_kernel, other_namespace, unknown_start, child.identity()}, 0);
  EXPECT_EQ(watch.watched(), std::vector<int>{5});
}

TEST(PeerWatch, ARankDoesNotWatchItselfAndAMovedWatchKeepsItsPeers) {
  const Child child;
  ASSERT_GT(child.pid(), 0);
  const ProcessIdentity me = identity_of_this_process();
  EXPECT_TRUE(PeerWatch({me}, 0).watched().empty());
  EXPECT_TRUE(PeerWatch({me, child.identity()}, 2).watched().empty()) << "a rank out of range watches nothing";
  PeerWatch moved({child.identity(), me}, 1);
  EXPECT_EQ(moved.watched(), std::vector<int>{0});
  const PeerWatch taken(std::move(moved));
  EXPECT_EQ(taken.watched(), std::vector<int>{0});
  EXPECT_TRUE(moved.watched().empty());  // NOLINT(bugprone-use-after-move): moved from, it holds nothing
}

}  // namespace
}  // namespace ddp
