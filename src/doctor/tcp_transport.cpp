#include "doctor/tcp_transport.hpp"

#include <algorithm>
#include <thread>

namespace ddp::doctor {
namespace {

constexpr const char* kGreeting = "ddp-doctor/1";
constexpr size_t kMaxMessage = 64u << 20;
constexpr auto kRetryPause = std::chrono::milliseconds(100);
constexpr auto kGreetingWait = std::chrono::seconds(2);

std::string seconds_text(std::chrono::milliseconds duration) {
  return format_fixed(static_cast<double>(duration.count()) / 1000, duration.count() % 1000 ? 1 : 0) + " s";
}

class TcpTransport : public Transport {
 public:
  TcpTransport(const TcpExchangeSettings& settings, std::vector<Socket> peers, std::vector<int> members)
      : settings_(settings), peers_(std::move(peers)), members_(std::move(members)) {}

  int rank() const override { return settings_.rank; }
  const std::vector<int>& members() const override { return members_; }
  std::string describe() const override { return "tcp " + host_port(settings_.master_addr, settings_.master_port); }

  void send(int peer, std::string_view message, Deadline deadline) override {
    try {
      socket_for(peer).send_frame(message, deadline);
    } catch (const NetError& e) {
      throw ExchangeError("sending to rank " + std::to_string(peer) + ": " + e.what());
    }
  }

  std::string recv(int peer, Deadline deadline) override {
    try {
      return socket_for(peer).recv_frame(deadline, kMaxMessage);
    } catch (const NetError& e) {
      throw ExchangeError("waiting for rank " + std::to_string(peer) + ": " + e.what());
    }
  }

 private:
  const Socket& socket_for(int peer) const {
    // Rank 0 keeps one socket per rank; every other rank has one socket, to rank 0, in slot 0.
    const bool allowed = settings_.rank == 0 ? peer > 0 && peer < settings_.world_size : peer == 0;
    if (!allowed || !peers_[static_cast<size_t>(peer)].valid()) {
      throw ExchangeError("rank " + std::to_string(settings_.rank) + " has no connection to rank " +
                          std::to_string(peer));
    }
    return peers_[static_cast<size_t>(peer)];
  }

  TcpExchangeSettings settings_;
  std::vector<Socket> peers_;
  std::vector<int> members_;
};

std::string encode_members(const std::vector<int>& members) {
  WireWriter out;
  out.put("members").put_int(static_cast<int64_t>(members.size()));
  for (const int member : members) out.put_int(member);
  return out.bytes();
}

// Reads a greeting and returns the rank it names, or a reason to refuse the connection.
std::pair<int, std::string> read_greeting(const Socket& socket, const TcpExchangeSettings& settings,
                                          const std::vector<Socket>& peers, Deadline deadline) {
  WireReader in(socket.recv_frame(deadline, 4096));
  if (in.get() != kGreeting) return {-1, "not a ddp-doctor greeting"};
  const std::string session = in.get();
  const int64_t rank = in.get_int();
  const int64_t world_size = in.get_int();
  if (session != settings.session) return {-1, "it belongs to run " + session + ", this is run " + settings.session};
  if (world_size != settings.world_size) {
    return {-1, "it says WORLD_SIZE=" + std::to_string(world_size) + ", rank 0 has WORLD_SIZE=" +
                    std::to_string(settings.world_size)};
  }
  if (rank <= 0 || rank >= settings.world_size) return {-1, "RANK=" + std::to_string(rank) + " is out of range"};
  if (peers[static_cast<size_t>(rank)].valid()) return {-1, "RANK=" + std::to_string(rank) + " connected twice"};
  return {static_cast<int>(rank), ""};
}

std::unique_ptr<Transport> serve_as_rank0(const TcpExchangeSettings& settings) {
  Socket listener;
  try {
    listener = Socket::listen_on("", settings.master_port);
  } catch (const NetError& e) {
    throw ExchangeError(std::string(e.what()) + "; another program holds MASTER_PORT on rank 0's node: " +
                        "choose another port (srun --ddp-port=N, or MASTER_PORT)");
  }
  std::vector<Socket> peers(static_cast<size_t>(settings.world_size));
  int connected = 1;
  const Deadline deadline = Deadline::after(settings.connect_timeout);
  while (connected < settings.world_size) {
    Socket socket;
    try {
      socket = listener.accept(deadline);
    } catch (const NetError&) {
      break;  // the ranks that did not come are reported as missing, not as an error of rank 0
    }
    try {
      const auto [rank, refusal] = read_greeting(socket, settings, peers, Deadline::after(kGreetingWait));
      if (rank < 0) {
        socket.send_frame(WireWriter().put("refused").put(refusal).bytes(), Deadline::after(kGreetingWait));
        continue;
      }
      socket.set_no_delay();
      peers[static_cast<size_t>(rank)] = std::move(socket);
      ++connected;
    } catch (const std::exception&) {
      continue;  // a stranger on the port (a scanner, a stale client): ignore it
    }
  }
  std::vector<int> members{0};
  for (int rank = 1; rank < settings.world_size; ++rank) {
    if (peers[static_cast<size_t>(rank)].valid()) members.push_back(rank);
  }
  const std::string member_message = encode_members(members);
  for (const int rank : members) {
    if (rank == 0) continue;
    try {
      peers[static_cast<size_t>(rank)].send_frame(member_message, Deadline::after(settings.connect_timeout));
    } catch (const NetError&) {
      peers[static_cast<size_t>(rank)] = Socket();
    }
  }
  members.erase(std::remove_if(members.begin() + 1, members.end(),
                               [&](int rank) { return !peers[static_cast<size_t>(rank)].valid(); }),
                members.end());
  return std::make_unique<TcpTransport>(settings, std::move(peers), std::move(members));
}

Socket connect_with_retries(const TcpExchangeSettings& settings, Deadline deadline) {
  const std::string where = host_port(settings.master_addr, settings.master_port);
  std::string reason = "timed out";
  while (!deadline.expired()) {
    try {
      return Socket::connect_to(settings.master_addr, settings.master_port, deadline);
    } catch (const NetError& e) {
      reason = e.what();
    }
    // Rank 0 may simply not be listening yet: srun starts the tasks of a step at about the same time.
    std::this_thread::sleep_for(std::min(kRetryPause, std::chrono::milliseconds(deadline.poll_ms())));
  }
  throw ExchangeError("cannot reach rank 0 at " + where + " within " + seconds_text(settings.connect_timeout) +
                      ": " + reason + " (is rank 0 running, does MASTER_ADDR resolve to its node, and do firewalls " +
                      "or security groups allow TCP port " + std::to_string(settings.master_port) +
                      " between the nodes?)");
}

std::vector<int> read_members(const Socket& socket, const TcpExchangeSettings& settings, Deadline deadline) {
  const std::string where = host_port(settings.master_addr, settings.master_port);
  std::string message;
  try {
    message = socket.recv_frame(deadline, kMaxMessage);
  } catch (const NetError& e) {
    throw ExchangeError("rank 0 at " + where + " accepted the connection but did not answer: " + e.what());
  }
  WireReader in(message);
  const std::string kind = in.get();
  if (kind == "refused") throw ExchangeError("rank 0 at " + where + " refused rank " + std::to_string(settings.rank) +
                                             ": " + in.get());
  if (kind != "members") throw ExchangeError("rank 0 at " + where + " sent an unexpected reply");
  std::vector<int> members(static_cast<size_t>(in.get_int()));
  for (int& member : members) member = static_cast<int>(in.get_int());
  return members;
}

std::unique_ptr<Transport> join_rank0(const TcpExchangeSettings& settings) {
  const Deadline connect_deadline = Deadline::after(settings.connect_timeout);
  Socket socket = connect_with_retries(settings, connect_deadline);
  socket.set_no_delay();
  const std::string greeting = WireWriter()
                                   .put(kGreeting)
                                   .put(settings.session)
                                   .put_int(settings.rank)
                                   .put_int(settings.world_size)
                                   .bytes();
  try {
    socket.send_frame(greeting, connect_deadline);
  } catch (const NetError& e) {
    throw ExchangeError("rank 0 at " + host_port(settings.master_addr, settings.master_port) +
                        " closed the connection: " + e.what());
  }
  // Rank 0 answers once every rank came or its own wait ended, up to one connect timeout after it started.
  const auto members = read_members(socket, settings, Deadline::after(2 * settings.connect_timeout));
  std::vector<Socket> peers(1);
  peers[0] = std::move(socket);
  return std::make_unique<TcpTransport>(settings, std::move(peers), members);
}

}  // namespace

std::unique_ptr<Transport> open_tcp_exchange(const TcpExchangeSettings& settings) {
  return settings.rank == 0 ? serve_as_rank0(settings) : join_rank0(settings);
}

}  // namespace ddp::doctor
