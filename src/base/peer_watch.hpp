#pragma once
// Which peers of this process have ended, seen by the kernel rather than by a collective that fails: for ranks that
// wait on each other in shared memory (MPI on one node), where nothing closes a connection when a peer dies, so the
// survivors wait until their timeout. Each rank describes itself (ProcessIdentity), the ranks exchange their
// descriptions, and each rank watches with a pidfd every peer on its own kernel and in its own PID namespace whose PID
// still names the process that described itself: the peer's start time is read again after its pidfd is open, so a
// PID reused since is not watched. A peer it cannot be sure of (another node or container, a start time it cannot
// read, a kernel without pidfd_open) is not watched, and its failure stays the caller's timeout's to find.
#include <array>
#include <cstdint>
#include <vector>

namespace ddp {

// A process as the kernel names it, of fixed size and layout: ranks exchange it as bytes.
struct ProcessIdentity {
  std::array<char, 40> boot_id{};  // /proc/sys/kernel/random/boot_id (NUL-terminated): which kernel runs it
  std::uint64_t pid_ns_dev = 0;    // its PID namespace: the device and inode of /proc/self/ns/pid
  std::uint64_t pid_ns_ino = 0;
  std::int64_t pid = 0;
  std::uint64_t start_ticks = 0;  // its start time, field 22 of /proc/PID/stat; 0: unknown
};

// This process's identity; fields it cannot read stay empty (such a process is watched by none).
ProcessIdentity identity_of_this_process();

// The start time of process `pid` in clock ticks after boot (field 22 of /proc/PID/stat); 0 when it cannot be read.
std::uint64_t process_start_ticks(std::int64_t pid);

class PeerWatch {
 public:
  PeerWatch() = default;
  // Watches every rank of `ranks` (indexed by rank) but `self` that it can be sure of, as above.
  PeerWatch(const std::vector<ProcessIdentity>& ranks, int self);
  ~PeerWatch();
  PeerWatch(PeerWatch&& other) noexcept;
  PeerWatch& operator=(PeerWatch&& other) noexcept;
  PeerWatch(const PeerWatch&) = delete;
  PeerWatch& operator=(const PeerWatch&) = delete;

  // The ranks watched, in order.
  std::vector<int> watched() const;
  // The lowest watched rank that has ended (exited or killed; a stopped process has not); -1 while none has.
  int ended() const;

 private:
  struct Peer {
    int rank;
    int pidfd;
  };
  void close_all();
  std::vector<Peer> peers_;
};

}  // namespace ddp
