#include "doctor/run/group.hpp"

#include <mpi.h>

#include <string>

#include "core/mpi_master.hpp"
#include "core/netif.hpp"

namespace ddp::doctor {

void share_master_over_mpi(Launch& launch) {
  if (MPI_Init(nullptr, nullptr) != MPI_SUCCESS) throw ExchangeError("MPI_Init failed");
  // Rank 0 advertises the address its peers reach it at (the interfaces of the step), not its host name.
  std::string address = launch.rank == 0 ? advertised_address(launch.socket_ifnames) : std::string();
  broadcast_master(address, launch.master_port);
  MPI_Finalize();
  launch.master_addr = address;
}

}  // namespace ddp::doctor
