#pragma once
// Rank 0's rendezvous address and port, sent to every rank of MPI_COMM_WORLD: how a program that mpirun started
// without MASTER_ADDR finds rank 0 (ddp-train, ddp-doctor). Header-only, for the translation units that link MPI
// (ddp_core itself does not); MPI must be initialised, and every rank must call it.
#include <mpi.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <string>

namespace ddp {

// Rank 0's `address` and `port` are sent; every other rank's are replaced by them. An address is cut at 255 bytes.
inline void broadcast_master(std::string& address, uint16_t& port) {
  std::array<char, 256> buffer{};
  std::strncpy(buffer.data(), address.c_str(), buffer.size() - 1);
  int value = port;
  MPI_Bcast(buffer.data(), static_cast<int>(buffer.size()), MPI_CHAR, 0, MPI_COMM_WORLD);
  MPI_Bcast(&value, 1, MPI_INT, 0, MPI_COMM_WORLD);
  address = buffer.data();
  port = static_cast<uint16_t>(value);
}

}  // namespace ddp
