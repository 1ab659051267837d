#include "ddp_runtime/mpi_bootstrap.hpp"

#include "error.hpp"

#ifdef DDP_WITH_MPI
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <mpi.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#endif

namespace ddp::runtime {

#ifdef DDP_WITH_MPI
namespace {

std::string interface_address(const std::string& interface) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) throw Error("cannot list network interfaces to find " + interface);
  std::string address;
  for (ifaddrs* entry = list; entry != nullptr && address.empty(); entry = entry->ifa_next) {
    if (entry->ifa_addr == nullptr || entry->ifa_addr->sa_family != AF_INET || interface != entry->ifa_name) continue;
    char text[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(entry->ifa_addr)->sin_addr, text, sizeof text);
    address = text;
  }
  freeifaddrs(list);
  if (address.empty()) throw Error("GLOO_SOCKET_IFNAME=" + interface + " has no IPv4 address on this host; name an interface that ip addr lists");
  return address;
}

// Same host name torchrun's --standalone would use: the one the other ranks can resolve.
std::string own_address(const Launch& launch) {
  if (!launch.socket_ifnames.empty()) return interface_address(launch.socket_ifnames.front());
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return host;
}

// Bind to port 0 and let the kernel pick, as torchrun does for --standalone.
int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  socklen_t length = sizeof address;
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    if (fd >= 0) close(fd);
    throw Error(std::string("cannot find a free TCP port for the rendezvous: ") + std::strerror(errno));
  }
  close(fd);
  return ntohs(address.sin_port);
}

void init_mpi_once() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return;
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
}

}  // namespace

void share_master_over_mpi(Launch& launch) {
  init_mpi_once();
  std::array<char, 256> address{};
  int port = 0;
  if (launch.rank == 0) {
    std::strncpy(address.data(), own_address(launch).c_str(), address.size() - 1);
    port = launch.master_port > 0 ? launch.master_port : free_port();
  }
  MPI_Bcast(address.data(), static_cast<int>(address.size()), MPI_CHAR, 0, MPI_COMM_WORLD);
  MPI_Bcast(&port, 1, MPI_INT, 0, MPI_COMM_WORLD);
  launch.master_addr = address.data();
  launch.master_port = port;
}

void finalize_mpi() {
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Finalize();
}

#else

void share_master_over_mpi(Launch&) {
  throw Error("under mpirun MASTER_ADDR is not set, and this ddp-train was built without MPI to share it; export "
              "it: mpirun -x MASTER_ADDR=<rank 0's host> -x MASTER_PORT=29500 ...");
}

void finalize_mpi() {}

#endif

}  // namespace ddp::runtime
