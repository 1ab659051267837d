#pragma once
// Ranks as threads of this process on 127.0.0.1, for the tests of the cross-node run: each with its own group met
// at rank 0's store, and a port that refuses connections.
#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <functional>
#include <future>

#include "base/socket.hpp"
#include "doctor/run/group.hpp"
#include "test_support.hpp"

namespace ddp::doctor::testing {

using namespace std::chrono_literals;

inline Launch launch_of(int rank, int world_size, uint16_t port) {
  Launch launch;
  launch.source = LaunchSource::Torchrun;
  launch.rank = rank;
  launch.world_size = world_size;
  launch.master_addr = "127.0.0.1";
  launch.master_port = port;
  launch.run_id = "test-run";
  return launch;
}

// Runs one body per rank, each in a thread with its own group; rethrows the first failure. Rank 0's store listens
// on a port the kernel picks, handed to the others as under mpirun: no port can be taken in between.
inline void run_ranks(int world_size, const std::function<void(Group&)>& body) {
  std::promise<uint16_t> port;
  const std::shared_future<uint16_t> shared_port = port.get_future().share();
  const MasterSharer share = [&](Launch& launch) {
    if (launch.rank == 0) port.set_value(launch.master_port);
    launch.master_addr = "127.0.0.1";
    launch.master_port = shared_port.get();
  };
  on_threads(world_size, [&](int rank) {
    Launch launch = launch_of(rank, world_size, 0);
    launch.source = LaunchSource::OpenMpi;
    launch.master_addr.clear();
    const Meeting meeting = meet(launch, budget_of(10s), share);
    body(*meeting.group);
    meeting.group->barrier("test done", Deadline::after(10s));
    meeting.group->finish(Deadline::after(10s));
  });
}

// A port held by a socket that is bound but does not listen: connecting to it is refused, and no other process
// can take it while the test runs.
struct RefusingPort {
  Socket socket = Socket(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  uint16_t port = 0;
  RefusingPort() {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof address;
    bind(socket.fd(), reinterpret_cast<sockaddr*>(&address), sizeof address);
    getsockname(socket.fd(), reinterpret_cast<sockaddr*>(&address), &length);
    port = ntohs(address.sin_port);
  }
};

}  // namespace ddp::doctor::testing
