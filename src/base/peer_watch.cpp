#include "base/peer_watch.hpp"

#include <poll.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>

namespace ddp {
namespace {

// A descriptor that becomes readable when the process ends; -1 where the kernel (before 5.3) or libc has none.
int open_pidfd(std::int64_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(syscall(SYS_pidfd_open, static_cast<pid_t>(pid), 0));
#else
  (void)pid;
  return -1;
#endif
}

bool same_kernel_and_namespace(const ProcessIdentity& a, const ProcessIdentity& b) {
  return a.boot_id[0] != '\0' && a.boot_id == b.boot_id && a.pid_ns_ino != 0 && a.pid_ns_dev == b.pid_ns_dev &&
         a.pid_ns_ino == b.pid_ns_ino;
}

}  // namespace

std::uint64_t process_start_ticks(std::int64_t pid) {
  std::ifstream file("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(file, stat)) return 0;
  // "PID (COMM) STATE PPID ...": COMM may hold spaces and parentheses, so the fields count from the last ')'.
  const std::size_t comm_end = stat.rfind(')');
  if (comm_end == std::string::npos) return 0;
  std::istringstream fields(stat.substr(comm_end + 1));
  std::string field;
  for (int number = 3; number <= 22 && fields >> field; ++number) {
    if (number == 22) return std::strtoull(field.c_str(), nullptr, 10);
  }
  return 0;
}

ProcessIdentity identity_of_this_process() {
  ProcessIdentity identity;
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::string boot_id;
  if (std::getline(boot, boot_id)) {
    std::copy_n(boot_id.begin(), std::min(boot_id.size(), identity.boot_id.size() - 1), identity.boot_id.begin());
  }
  struct stat ns = {};
  if (stat("/proc/self/ns/pid", &ns) == 0) {
    identity.pid_ns_dev = ns.st_dev;
    identity.pid_ns_ino = ns.st_ino;
  }
  identity.pid = getpid();
  identity.start_ticks = process_start_ticks(identity.pid);
  return identity;
}

PeerWatch::PeerWatch(const std::vector<ProcessIdentity>& ranks, int self) {
  if (self < 0 || static_cast<std::size_t>(self) >= ranks.size()) return;
  const ProcessIdentity& mine = ranks[self];
  for (std::size_t rank = 0; rank < ranks.size(); ++rank) {
    const ProcessIdentity& peer = ranks[rank];
    if (static_cast<int>(rank) == self || !same_kernel_and_namespace(mine, peer) || peer.pid <= 0 ||
        peer.start_ticks == 0) {
      continue;
    }
    const int pidfd = open_pidfd(peer.pid);
    if (pidfd < 0) continue;
    // Read after the open: if the PID still names the process that described itself, the pidfd refers to it.
    if (process_start_ticks(peer.pid) != peer.start_ticks) {
      close(pidfd);
      continue;
    }
    peers_.push_back({static_cast<int>(rank), pidfd});
  }
}

PeerWatch::~PeerWatch() { close_all(); }

PeerWatch::PeerWatch(PeerWatch&& other) noexcept : peers_(std::exchange(other.peers_, {})) {}

PeerWatch& PeerWatch::operator=(PeerWatch&& other) noexcept {
  if (this != &other) {
    close_all();
    peers_ = std::exchange(other.peers_, {});
  }
  return *this;
}

void PeerWatch::close_all() {
  for (const Peer& peer : peers_) close(peer.pidfd);
  peers_.clear();
}

std::vector<int> PeerWatch::watched() const {
  std::vector<int> ranks;
  for (const Peer& peer : peers_) ranks.push_back(peer.rank);
  return ranks;
}

int PeerWatch::ended() const {
  for (const Peer& peer : peers_) {
    pollfd ready{peer.pidfd, POLLIN, 0};
    if (poll(&ready, 1, 0) > 0 && (ready.revents & (POLLIN | POLLHUP | POLLERR)) != 0) return peer.rank;
  }
  return -1;
}

}  // namespace ddp
