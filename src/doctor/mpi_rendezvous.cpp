#include "doctor/group.hpp"

#include <mpi.h>

#include <array>
#include <cstring>

#include "netif.hpp"

namespace ddp::doctor {

void share_master_over_mpi(Launch& launch) {
  if (MPI_Init(nullptr, nullptr) != MPI_SUCCESS) throw ExchangeError("MPI_Init failed");
  std::array<char, 256> address{};
  int port = launch.master_port;
  if (launch.rank == 0)
    std::strncpy(address.data(), advertised_address(launch.socket_ifnames).c_str(), address.size() - 1);
  MPI_Bcast(address.data(), static_cast<int>(address.size()), MPI_CHAR, 0, MPI_COMM_WORLD);
  MPI_Bcast(&port, 1, MPI_INT, 0, MPI_COMM_WORLD);
  MPI_Finalize();
  launch.master_addr = address.data();
  launch.master_port = static_cast<uint16_t>(port);
}

}  // namespace ddp::doctor
