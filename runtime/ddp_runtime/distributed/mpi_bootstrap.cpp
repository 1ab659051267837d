#include "ddp_runtime/distributed/mpi_bootstrap.hpp"

#include "core/error.hpp"

#ifdef DDP_WITH_MPI
#include <mpi.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "base/peer_watch.hpp"
#include "core/mpi_master.hpp"
#endif

namespace ddp::runtime {

#ifdef DDP_WITH_MPI
namespace {

using Clock = std::chrono::steady_clock;

// How often the watchdog looks at the call in progress: its timeouts fire up to this much late.
constexpr auto kWatchdogPeriod = std::chrono::milliseconds(200);

// One thread makes the MPI calls, in the order they were posted; a second one, the watchdog, wakes a few times a
// second and aborts the job when a call has run past its timeout, or when a peer it watches (a rank on this node:
// peer_watch.hpp) has ended while a call waits. Ranks on one node talk through shared memory, where nothing tells
// the survivors that a peer died: without the watch they waited until the timeout, unless srun or mpirun ended them
// first.
class MpiThread {
 public:
  explicit MpiThread(PeerWatch peers)
      : peers_(std::move(peers)), worker_([this] { serve(); }), watchdog_([this] { watch(); }) {}

  void post(std::function<void()> call, MpiCallInfo info, int rank, std::chrono::milliseconds timeout) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopping_) throw std::logic_error("an MPI call was posted after finalize_mpi()");
      queue_.push_back({std::move(call), info, rank, timeout});
    }
    work_ready_.notify_one();
  }

  // Runs what was posted, then ends both threads.
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    work_ready_.notify_one();
    stopped_.notify_one();
    worker_.join();
    watchdog_.join();
  }

 private:
  struct Call {
    std::function<void()> run;
    MpiCallInfo info;
    int rank = 0;
    std::chrono::milliseconds timeout{};
  };

  void serve() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      work_ready_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      current_ = std::move(queue_.front());
      queue_.pop_front();
      started_ = Clock::now();
      running_ = true;
      lock.unlock();
      current_.run();
      lock.lock();
      running_ = false;
      current_.run = nullptr;  // releases the call's tensors now, not at the next call
    }
  }

  void watch() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stopping_) {
      stopped_.wait_for(lock, kWatchdogPeriod);
      if (!running_) continue;
      if (Clock::now() - started_ > current_.timeout) abort_after_timeout();
      const int ended = peers_.ended();
      if (ended >= 0) abort_after_peer_ended(ended);
    }
  }

  void abort_after_peer_ended(int peer) const {
    std::fprintf(
        stderr,
        "rank %d: rank %d on this node ended while this rank waited in MPI %s of %lld bytes; aborting the job\n",
        current_.rank, peer, current_.info.operation, static_cast<long long>(current_.info.bytes));
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);  // as after a timeout
  }

  void abort_after_timeout() const {
    std::fprintf(stderr,
                 "rank %d: MPI %s of %lld bytes has not completed within %lld s (--timeout): another rank has failed, "
                 "stopped or not made the same call; aborting the job\n",
                 current_.rank, current_.info.operation, static_cast<long long>(current_.info.bytes),
                 static_cast<long long>(std::chrono::duration_cast<std::chrono::seconds>(current_.timeout).count()));
    std::fflush(stderr);
    // Strictly, MPI_THREAD_SERIALIZED forbids this call while the MPI thread is inside MPI; OpenMPI's abort only
    // reports to the launcher (PMIx, thread-safe) and exits, which is all that is left to do.
    MPI_Abort(MPI_COMM_WORLD, 1);
  }

  const PeerWatch peers_;
  std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable stopped_;
  std::deque<Call> queue_;
  bool stopping_ = false;
  Call current_;
  bool running_ = false;
  Clock::time_point started_;
  std::thread worker_;
  std::thread watchdog_;
};

// Never destroyed: a failing rank exits (or aborts) with it still running.
std::atomic<MpiThread*> started_thread{nullptr};

// Every rank's identity, gathered by every rank before its MPI thread exists (so this thread alone calls MPI), and
// the peers among them this rank can watch.
PeerWatch watch_peers(MpiWorld world) {
  static_assert(std::is_trivially_copyable<ProcessIdentity>::value, "exchanged as bytes");
  const ProcessIdentity mine = identity_of_this_process();
  std::vector<ProcessIdentity> all(static_cast<std::size_t>(world.size));
  MPI_Allgather(&mine, sizeof mine, MPI_BYTE, all.data(), sizeof mine, MPI_BYTE, MPI_COMM_WORLD);
  return PeerWatch(all, world.rank);
}

MpiThread& mpi_thread() {
  static MpiThread* const thread = [] {
    auto* created = new MpiThread(watch_peers(init_mpi()));
    started_thread = created;
    return created;
  }();
  return *thread;
}

MpiWorld initialise_mpi() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  int provided = 0;
  if (initialized) {
    MPI_Query_thread(&provided);
  } else {
    // SERIALIZED, not MULTIPLE: one thread calls MPI at a time, and OpenMPI's MULTIPLE mode adds locking to
    // every call.
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
  }
  if (provided < MPI_THREAD_SERIALIZED) {
    throw Error("this MPI library provides thread level " + std::to_string(provided) +
                ", below MPI_THREAD_SERIALIZED (" + std::to_string(MPI_THREAD_SERIALIZED) +
                ") which the MPI process group needs; use an MPI built with "
                "thread support (Debian's OpenMPI is), or DDP_BACKEND=gloo");
  }
  MpiWorld world;
  MPI_Comm_rank(MPI_COMM_WORLD, &world.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world.size);
  return world;
}

}  // namespace

MpiWorld init_mpi() {
  static const MpiWorld world = initialise_mpi();
  return world;
}

void start_mpi_thread() { mpi_thread(); }

void post_mpi_call(std::function<void()> call, MpiCallInfo info, int rank, std::chrono::milliseconds timeout) {
  mpi_thread().post(std::move(call), info, rank, timeout);
}

void abort_mpi_job(int status) {
  if (started_thread.load() != nullptr) MPI_Abort(MPI_COMM_WORLD, status);
}

void share_master_over_mpi(Launch& launch) {
  init_mpi();
  broadcast_master(launch.master_addr, launch.master_port);
}

void finalize_mpi() {
  if (MpiThread* thread = started_thread.exchange(nullptr)) thread->stop();
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Finalize();
}

#else

void share_master_over_mpi(Launch&) {
  throw Error(
      "under mpirun MASTER_ADDR is not set, and this ddp-train was built without MPI to share it; export "
      "it: mpirun -x MASTER_ADDR=<rank 0's host> -x MASTER_PORT=29500 ...");
}

MpiWorld init_mpi() { throw Error("this program was built without MPI; install libopenmpi-dev and rebuild"); }

void start_mpi_thread() { init_mpi(); }

void post_mpi_call(std::function<void()>, MpiCallInfo, int, std::chrono::milliseconds) { init_mpi(); }

void finalize_mpi() {}

void abort_mpi_job(int) {}

#endif

}  // namespace ddp::runtime
