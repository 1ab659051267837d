#include "doctor/mpi_transport.hpp"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <thread>

namespace ddp::doctor {
namespace {

constexpr int kTag = 0x6464;  // "dd"
constexpr auto kLongestPause = std::chrono::microseconds(500);

// Spins briefly, then sleeps a little longer each time: quick answers stay quick, long waits stay cheap.
class Backoff {
 public:
  void pause() {
    if (++polls_ > 100) std::this_thread::sleep_for(pause_ = std::min(kLongestPause, pause_ * 2));
  }

 private:
  int polls_ = 0;
  std::chrono::microseconds pause_{1};
};

class MpiTransport : public Transport {
 public:
  MpiTransport() {
    int rank = 0;
    int size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    rank_ = rank;
    for (int member = 0; member < size; ++member) members_.push_back(member);
  }
  ~MpiTransport() override {
    // MPI_Finalize waits for every rank; after a rank went missing, that wait would never end.
    if (lost_peer_) MPI_Abort(MPI_COMM_WORLD, 1);
    MPI_Finalize();
  }

  int rank() const override { return rank_; }
  const std::vector<int>& members() const override { return members_; }
  std::string describe() const override { return "mpi"; }

  void send(int peer, std::string_view message, Deadline deadline) override {
    MPI_Request request = MPI_REQUEST_NULL;
    MPI_Isend(message.data(), static_cast<int>(message.size()), MPI_BYTE, peer, kTag, MPI_COMM_WORLD, &request);
    Backoff backoff;
    for (int done = 0;;) {
      MPI_Test(&request, &done, MPI_STATUS_IGNORE);
      if (done) return;
      if (deadline.expired()) {
        lost_peer_ = true;
        throw ExchangeError("rank " + std::to_string(peer) + " did not take a message in time");
      }
      backoff.pause();
    }
  }

  std::string recv(int peer, Deadline deadline) override {
    MPI_Message message = MPI_MESSAGE_NULL;
    MPI_Status status{};
    Backoff backoff;
    for (int found = 0; !found;) {
      MPI_Improbe(peer, kTag, MPI_COMM_WORLD, &found, &message, &status);
      if (found) break;
      if (deadline.expired()) {
        lost_peer_ = true;
        throw ExchangeError("timed out waiting for rank " + std::to_string(peer));
      }
      backoff.pause();
    }
    int size = 0;
    MPI_Get_count(&status, MPI_BYTE, &size);
    std::string bytes(static_cast<size_t>(size), '\0');
    MPI_Mrecv(bytes.data(), size, MPI_BYTE, &message, MPI_STATUS_IGNORE);
    return bytes;
  }

 private:
  int rank_ = 0;
  std::vector<int> members_;
  bool lost_peer_ = false;
};

}  // namespace

std::unique_ptr<Transport> open_mpi_exchange(int* argc, char*** argv) {
  if (MPI_Init(argc, argv) != MPI_SUCCESS) throw ExchangeError("MPI_Init failed");
  return std::make_unique<MpiTransport>();
}

}  // namespace ddp::doctor
