#include "doctor/link_test.hpp"

#include <algorithm>
#include <cstring>

namespace ddp::doctor {
namespace {

constexpr size_t kChunk = 1u << 20;
constexpr uint64_t kStreamFollows = ~0ull;

std::string u64_bytes(uint64_t value) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[static_cast<size_t>(i)] = static_cast<char>((value >> (8 * i)) & 0xff);
  return bytes;
}

uint64_t read_u64(const Socket& socket, Deadline deadline) {
  unsigned char bytes[8];
  socket.recv_exact(reinterpret_cast<char*>(bytes), sizeof bytes, deadline);
  uint64_t value = 0;
  for (int i = 0; i < 8; ++i) value |= static_cast<uint64_t>(bytes[i]) << (8 * i);
  return value;
}

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::nth_element(values.begin(), values.begin() + static_cast<long>(values.size() / 2), values.end());
  return values[values.size() / 2];
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double measure_rtt(const Socket& socket, int pings, Deadline deadline) {
  std::vector<double> round_trips;
  for (int i = 0; i < pings; ++i) {
    const auto start = std::chrono::steady_clock::now();
    socket.send_all(u64_bytes(static_cast<uint64_t>(i)), deadline);
    if (read_u64(socket, deadline) != static_cast<uint64_t>(i)) throw NetError("the peer echoed the wrong ping");
    round_trips.push_back(seconds_since(start));
  }
  return median(round_trips);
}

// Frames of kChunk bytes behind a 4-byte length, then an empty frame; the receiver acknowledges the total.
LinkMeasurement stream(const Socket& socket, const LinkTestSize& size, Deadline deadline) {
  std::string frame(4 + kChunk, '\x5a');
  const uint32_t length = kChunk;
  for (int i = 0; i < 4; ++i) frame[static_cast<size_t>(i)] = static_cast<char>((length >> (8 * i)) & 0xff);
  LinkMeasurement measured;
  const auto start = std::chrono::steady_clock::now();
  const auto stop_at = start + size.max_time;
  socket.send_all(u64_bytes(kStreamFollows), deadline);
  while (measured.bytes < size.max_bytes && std::chrono::steady_clock::now() < stop_at) {
    socket.send_all(frame, deadline);
    measured.bytes += kChunk;
  }
  socket.send_all(std::string(4, '\0'), deadline);
  if (read_u64(socket, deadline) != measured.bytes) throw NetError("the peer received a different byte count");
  measured.seconds = seconds_since(start);
  return measured;
}

std::string failure_text(const Peer& server, const std::string& reason) {
  return "cannot test the link to " + describe(server) + " at " + host_port(server.data_address, server.link_port) +
         ": " + reason + " (do firewalls or security groups allow TCP between the nodes on all ports? Gloo and "
         "NCCL open ephemeral ports besides MASTER_PORT)";
}

std::vector<CheckResult> measure_pair(const Peer& server, const LinkSettings& settings) {
  const Deadline deadline = Deadline::after(settings.size.max_time + settings.timeout);
  std::vector<CheckResult> results;
  try {
    const auto measured = run_link_test(server.data_address, server.link_port, settings.size, deadline);
    results = grade_link(measured, describe(server), settings.min_gbps, settings.max_rtt_us);
  } catch (const NetError& e) {
    results = {make_result("net.p2p_bw", Status::Fail, "no connection", "", failure_text(server, e.what()))};
  }
  return results;
}

std::string serve_pair(const Socket& listener, const LinkSettings& settings) {
  try {
    serve_link_test(listener, Deadline::after(settings.size.max_time + settings.timeout));
    return "";
  } catch (const NetError& e) {
    return e.what();
  }
}

// Rank 0's part in one pair; it may itself be the sender or the receiver.
std::vector<CheckResult> run_pair(Transport& transport, const Peer& client, const Peer& server,
                                  const Socket& listener, const LinkSettings& settings) {
  const Deadline deadline = Deadline::after(settings.size.max_time + 2 * settings.timeout);
  if (server.rank != 0) transport.send(server.rank, WireWriter().put("serve").bytes(), deadline);
  if (client.rank != 0) {
    transport.send(client.rank,
                   WireWriter().put("measure").put(server.data_address).put_int(server.link_port).put_int(server.rank)
                       .put(server.host).bytes(),
                   deadline);
  }
  std::vector<CheckResult> results;
  if (server.rank == 0) serve_pair(listener, settings);
  if (client.rank == 0) results = measure_pair(server, settings);
  if (client.rank != 0) results = decode_results(transport.recv(client.rank, deadline));
  if (server.rank != 0) transport.recv(server.rank, deadline);
  for (auto& result : results) {
    result.rank = client.rank;
    result.host = client.host;
  }
  return results;
}

// A rank other than 0 follows rank 0's instructions until it says "done".
void follow(Transport& transport, const Socket& listener, const LinkSettings& settings, Deadline deadline) {
  for (;;) {
    WireReader message(transport.recv(0, deadline));
    const std::string kind = message.get();
    if (kind == "done") return;
    const Deadline reply_deadline = Deadline::after(settings.size.max_time + 2 * settings.timeout);
    if (kind == "serve") {
      transport.send(0, WireWriter().put("served").put(serve_pair(listener, settings)).bytes(), reply_deadline);
    } else if (kind == "measure") {
      Peer server;
      server.data_address = message.get();
      server.link_port = static_cast<uint16_t>(message.get_int());
      server.rank = static_cast<int>(message.get_int());
      server.host = message.get();
      transport.send(0, encode_results(measure_pair(server, settings)), reply_deadline);
    } else {
      throw ExchangeError("unexpected instruction " + kind + " from rank 0 during the link tests");
    }
  }
}

}  // namespace

LinkTestSize link_test_size(bool quick) {
  if (quick) return {32ull << 20, std::chrono::milliseconds(500), 50};
  return {1ull << 30, std::chrono::milliseconds(3000), 500};
}

void serve_link_test(const Socket& listener, Deadline deadline) {
  const Socket socket = listener.accept(deadline);
  socket.set_no_delay();
  for (uint64_t ping; (ping = read_u64(socket, deadline)) != kStreamFollows;) socket.send_all(u64_bytes(ping), deadline);
  std::vector<char> buffer(kChunk);
  uint64_t received = 0;
  for (;;) {
    unsigned char prefix[4];
    socket.recv_exact(reinterpret_cast<char*>(prefix), sizeof prefix, deadline);
    const uint32_t length = prefix[0] | prefix[1] << 8 | prefix[2] << 16 | static_cast<uint32_t>(prefix[3]) << 24;
    if (length == 0) break;
    if (length > buffer.size()) throw NetError("the peer sent an oversized frame");
    socket.recv_exact(buffer.data(), length, deadline);
    received += length;
  }
  socket.send_all(u64_bytes(received), deadline);
}

LinkMeasurement run_link_test(const std::string& address, uint16_t port, const LinkTestSize& size, Deadline deadline) {
  const Socket socket = Socket::connect_to(address, port, deadline);
  socket.set_no_delay();
  const double rtt = measure_rtt(socket, size.pings, deadline);
  LinkMeasurement measured = stream(socket, size, deadline);
  measured.rtt_seconds = rtt;
  return measured;
}

std::vector<CheckResult> grade_link(const LinkMeasurement& measured, const std::string& to, double min_gbps,
                                    double max_rtt_us) {
  const double rate = measured.seconds > 0 ? static_cast<double>(measured.bytes) / measured.seconds : 0;
  const Status bandwidth = grade_at_least(rate * 8 / 1e9, min_gbps, 0);
  const Status latency = grade_at_most(measured.rtt_seconds * 1e6, max_rtt_us, 1e300);
  return {
      make_result("net.p2p_bw", bandwidth, format_gbits(rate) + " to " + to,
                  ">= " + format_fixed(min_gbps, 0) + " Gbit/s",
                  format_bytes(measured.bytes) + " in " + format_seconds(measured.seconds) +
                      (bandwidth == Status::Ok ? "" : "; the guides ask for >= 10 Gbit/s between training nodes: "
                                                      "check the interface (--interface), cables and switch")),
      make_result("net.p2p_rtt", latency, format_seconds(measured.rtt_seconds) + " to " + to,
                  "<= " + format_fixed(max_rtt_us, 0) + " us",
                  latency == Status::Ok ? "median TCP round trip"
                                        : "slow round trips stall every all-reduce: are the nodes in one "
                                          "placement group / rack?"),
  };
}

std::vector<std::pair<Peer, Peer>> ring_pairs(const std::vector<Peer>& peers) {
  std::vector<Peer> servers;
  for (const auto& peer : leaders(peers)) {
    if (!peer.data_address.empty() && peer.link_port != 0) servers.push_back(peer);
  }
  std::vector<std::pair<Peer, Peer>> pairs;
  if (servers.size() < 2) return pairs;
  for (size_t i = 0; i < servers.size(); ++i) pairs.emplace_back(servers[i], servers[(i + 1) % servers.size()]);
  return pairs;
}

std::vector<CheckResult> check_links(Transport& transport, const std::vector<Peer>& peers, const Socket& listener,
                                     const LinkSettings& settings) {
  const auto pairs = ring_pairs(peers);
  if (transport.rank() != 0) {
    const auto per_pair = settings.size.max_time + 3 * settings.timeout;
    follow(transport, listener, settings, Deadline::after(per_pair * static_cast<int>(pairs.size() + 1)));
    return {};
  }
  std::vector<CheckResult> results;
  if (pairs.empty()) results.push_back(skipped("net.p2p_bw", "fewer than two nodes with a usable interface"));
  for (size_t i = 0; i < pairs.size(); ++i) {
    const auto& [client, server] = pairs[i];
    if (settings.progress) {
      settings.progress("link " + std::to_string(i + 1) + "/" + std::to_string(pairs.size()) + ": " +
                        describe(client) + " -> " + describe(server));
    }
    const auto pair_results = run_pair(transport, client, server, listener, settings);
    results.insert(results.end(), pair_results.begin(), pair_results.end());
  }
  for (const int member : transport.members()) {
    if (member != 0) transport.send(member, WireWriter().put("done").bytes(), Deadline::after(settings.timeout));
  }
  return results;
}

}  // namespace ddp::doctor
