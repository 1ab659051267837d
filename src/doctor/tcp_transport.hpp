#pragma once
// The exchange of `srun --ddp ddp-doctor` (and of any launcher that sets torchrun's variables): rank 0 listens on
// MASTER_PORT, the port the training will use, so connecting to it is also the master-port reachability check.
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "doctor/transport.hpp"

namespace ddp::doctor {

struct TcpExchangeSettings {
  std::string master_addr;
  uint16_t master_port = 0;
  int rank = 0;
  int world_size = 1;
  std::string session;  // the step's run id: a doctor of another step that reaches this port is refused
  std::chrono::milliseconds connect_timeout{30000};
};

// Rank 0 waits up to connect_timeout for every other rank; ranks that never come are left out of members().
// Other ranks retry while rank 0 is not listening yet. Throws ExchangeError with one line naming the address,
// the port, the timeout and the reason, e.g.
//   "cannot reach rank 0 at 10.0.0.1:29500 within 30 s: connection refused (...)"
std::unique_ptr<Transport> open_tcp_exchange(const TcpExchangeSettings& settings);

}  // namespace ddp::doctor
