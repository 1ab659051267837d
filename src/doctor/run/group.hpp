#pragma once
// The ranks of one doctor run and their exchanges: collectives made of keys in rank 0's store (store.hpp), each
// named by the step it belongs to, so that a rank that skipped a step after a local failure shows as a rank that
// did not reach it, instead of having its message read as another step's.
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/launch.hpp"
#include "doctor/checks/check.hpp"
#include "doctor/run/doctor_options.hpp"
#include "doctor/run/wire.hpp"
#include "store/store.hpp"

namespace ddp::doctor {

class Group {
 public:
  // One process on its own: no store, and every collective returns this process's own data.
  Group() = default;
  Group(std::unique_ptr<StoreServer> server, std::unique_ptr<StoreClient> store, int rank, std::vector<int> members,
        std::string description);

  int rank() const { return rank_; }
  // The ranks taking part, ascending, rank 0 first: ranks that never reached rank 0 are not members.
  const std::vector<int>& members() const { return members_; }
  int index() const;                                            // this rank's position in members()
  const std::string& describe() const { return description_; }  // "tcp 10.0.0.1:29500", "mpi", "single"
  StoreClient* store() { return store_.get(); }                 // null for one process on its own
  // A key of its own for each call: "step/N".
  std::string unique_key(const std::string& step) { return step + "/" + std::to_string(++steps_); }

  // Every member calls these in the same order with the same steps. gather: rank 0 gets every member's message
  // in members() order, the others an empty list. Throw ExchangeError naming the rank and the step.
  std::vector<std::string> gather(const std::string& step, const std::string& mine, Deadline deadline);
  std::string broadcast(const std::string& step, const std::string& from_root, Deadline deadline);
  std::vector<std::string> all_gather(const std::string& step, const std::string& mine, Deadline deadline);
  void barrier(const std::string& step, Deadline deadline);
  // After the last collective: the others disconnect, and rank 0 keeps its store up until they have, or until
  // `deadline`, so that nobody loses the last answer when rank 0's process ends.
  void finish(Deadline deadline);

 private:
  std::unique_ptr<StoreServer> server_;  // rank 0's
  std::unique_ptr<StoreClient> store_;
  int rank_ = 0;
  std::vector<int> members_{0};
  std::string description_ = "single";
  uint64_t steps_ = 0;
};

// How the ranks met: the group, net.master_port for the report, and the launch with rank 0's address where MPI
// handed it out.
struct Meeting {
  std::unique_ptr<Group> group;
  std::vector<CheckResult> results;  // rows without a rank are this rank's
  Launch launch;
};

// Under mpirun without MASTER_ADDR: hands rank 0's address and its store's port (launch.master_port on rank 0) to
// every rank, filling launch.master_addr and launch.master_port.
using MasterSharer = std::function<void(Launch& launch)>;
// The MasterSharer of mpirun: MPI_Init, a broadcast of rank 0's advertised_address() and port, MPI_Finalize
// (ddp_doctor_mpi, where MPI was found). Throws ExchangeError when MPI cannot start.
void share_master_over_mpi(Launch& launch);

// Rank 0 serves the store on MASTER_PORT (a port the kernel picks where `share` hands it out) and waits up to
// budget.exchange (--timeout) for every rank; the others connect, retrying for as long while rank 0 is not
// listening yet, and have its list of members by budget.meet. Throws ExchangeError when this rank cannot meet
// rank 0.
Meeting meet(Launch launch, const TimeBudget& budget, const MasterSharer& share);

// All members' entries, in members() order.
std::vector<Peer> exchange_peers(Group& group, const Peer& mine, Deadline deadline);
std::vector<Peer> leaders(const std::vector<Peer>& peers);
std::string describe(const Peer& peer);  // "rank 1 (node2)"

}  // namespace ddp::doctor
