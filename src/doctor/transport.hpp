#pragma once
// How doctor ranks talk: a star around rank 0, over TCP on MASTER_PORT (srun, torchrun variables) or over MPI
// (mpirun). Every cross-node check is written once against this interface and the collectives below.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "socket.hpp"
#include "doctor/wire.hpp"

namespace ddp::doctor {

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  // The ranks taking part, ascending, rank 0 first. Over TCP, ranks that never connected are not members.
  virtual const std::vector<int>& members() const = 0;
  // For the report: "tcp 10.0.0.1:29500", "mpi", "single".
  virtual std::string describe() const = 0;
  // Only between rank 0 and another member. Both throw ExchangeError naming the peer.
  virtual void send(int peer, std::string_view message, Deadline deadline) = 0;
  virtual std::string recv(int peer, Deadline deadline) = 0;

  // Numbers the collectives below, which carry it: a rank that skipped one after a local failure is reported
  // as out of step instead of having its message read as another collective's.
  uint64_t next_collective() { return ++collectives_; }

 private:
  uint64_t collectives_ = 0;
};

// Every member calls these in the same order.
// gather: rank 0 gets one message per member, in members() order; the others get an empty list.
std::vector<std::string> gather(Transport& transport, const std::string& mine, Deadline deadline);
std::string broadcast(Transport& transport, const std::string& from_root, Deadline deadline);
std::vector<std::string> all_gather(Transport& transport, const std::string& mine, Deadline deadline);
void barrier(Transport& transport, Deadline deadline);

// One process on its own: no peers, nothing to exchange.
std::unique_ptr<Transport> make_solo_transport();

}  // namespace ddp::doctor
