// The memory of the rank that hosts a store, under a flood from an outsider who reaches its port but does not hold
// the job's key (DDP_JOB_KEY), side by side in one run:
//   - c10d's TCPStore, which ddp-train's rank 0 and standby stores are: the outsider connects with PyTorch's own
//     client and sets VALUES values of VALUE_MB MB each (no authentication, no quota);
//   - the project's authenticated store (src/store/store.hpp, ddp-doctor's today): the same outsider cannot prove the
//     key, so it sets nothing; STRANGERS connections then each announce a VALUE_MB MB frame and send what they can.
// Prints the growth of this process's resident memory (both servers live in it) for each, and their ratio.
//   [VALUES=64] [VALUE_MB=8] [STRANGERS=256] store_flood_bench
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "base/socket.hpp"
#include "ddp_runtime/common/c10d_compat.hpp"
#include "store/store.hpp"

namespace {

using namespace std::chrono_literals;

int setting(const char* name, int fallback) {
  const char* value = std::getenv(name);
  return value != nullptr ? std::atoi(value) : fallback;
}

double resident_mb() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024;
  }
  return 0;
}

// What the outsider stores in a TCPStore it reaches: everything.
double flood_tcp_store(int values, int value_mb) {
  c10d::TCPStoreOptions options;
  options.port = 0;
  options.isServer = true;
  options.waitWorkers = false;
  options.timeout = 20s;
  const auto server = ddp::runtime::compat::make_tcp_store("127.0.0.1", options);
  options.port = static_cast<c10d::TCPStore&>(*server).getPort();
  options.isServer = false;
  const double before = resident_mb();
  {
    const auto outsider = ddp::runtime::compat::make_tcp_store("127.0.0.1", options);
    const std::vector<uint8_t> value(static_cast<std::size_t>(value_mb) << 20, 0x5a);
    for (int i = 0; i < values; ++i) outsider->set("junk/" + std::to_string(i), value);
  }
  return resident_mb() - before;
}

// What the same outsider stores in the project's store: nothing, however it tries.
double flood_project_store(int values, int value_mb, int strangers) {
  ddp::StoreServer server(0, "4711.0", 2, std::string(32, 'a'));
  const double before = resident_mb();
  try {
    ddp::StoreClient outsider("127.0.0.1", server.port(), {"4711.0", 2, 1, std::string(32, 'b')}, 2s);
    const std::string value(static_cast<std::size_t>(value_mb) << 20, 'Z');
    for (int i = 0; i < values; ++i) outsider.set("junk/" + std::to_string(i), value, ddp::Deadline::after(2s));
    std::printf("store_flood_bench: the outsider was admitted: the bench is wrong\n");
  } catch (const std::exception&) {
    // refused: it cannot prove the job's key
  }
  std::vector<ddp::Socket> open;
  const std::string chunk(64 << 10, 'Z');
  for (int i = 0; i < strangers; ++i) {
    try {
      ddp::Socket stranger = ddp::Socket::connect_to("127.0.0.1", server.port(), ddp::Deadline::after(1s));
      const uint32_t announced = static_cast<uint32_t>(value_mb) << 20;
      stranger.send_all(std::string(reinterpret_cast<const char*>(&announced), 4), ddp::Deadline::after(100ms));
      for (int sent = 0; sent < (value_mb << 20); sent += static_cast<int>(chunk.size())) {
        stranger.send_all(chunk, ddp::Deadline::after(100ms));
      }
      open.push_back(std::move(stranger));
    } catch (const std::exception&) {
      // the server closed it: its frame was over the greeting's limit
    }
  }
  std::this_thread::sleep_for(500ms);
  return resident_mb() - before;
}

}  // namespace

int main() {
  const int values = setting("VALUES", 64);
  const int value_mb = setting("VALUE_MB", 8);
  const int strangers = setting("STRANGERS", 256);
  // The project's store first: TCPStore keeps what it took until the process ends.
  const double project = flood_project_store(values, value_mb, strangers);
  const double tcp = flood_tcp_store(values, value_mb);
  std::printf("store_flood_bench: an outsider without the job's key sends %d values of %d MB (%d MB)\n", values,
              value_mb, values * value_mb);
  std::printf("  c10d TCPStore:            +%.0f MB resident\n", tcp);
  std::printf(
      "  the project's store:      +%.1f MB resident (the values refused, then %d strangers each announcing "
      "%d MB)\n",
      project, strangers, value_mb);
  std::printf("  ratio TCPStore / project: %.0fx\n", tcp / std::max(project, 0.1));
  return 0;
}
