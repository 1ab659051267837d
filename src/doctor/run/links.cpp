#include "doctor/run/links.hpp"

#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>

#include <algorithm>

#include "doctor/run/gloo.hpp"

namespace ddp::doctor {
namespace {

constexpr size_t kChunk = 1u << 20;
constexpr uint64_t kPingSlot = 1;
constexpr uint64_t kStreamSlot = 2;

using Clock = std::chrono::steady_clock;

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::nth_element(values.begin(), values.begin() + static_cast<long>(values.size() / 2), values.end());
  return values[values.size() / 2];
}

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

std::string failure_text(const Peer& server, const std::string& reason) {
  return "cannot test the link to " + describe(server) + " at " + server.data_address + ": " + reason +
         " (do firewalls or security groups allow TCP between the nodes on all ports? Gloo and NCCL open ephemeral "
         "ports besides MASTER_PORT)";
}

}  // namespace

LinkMeasureSize link_measure_size(bool quick, std::chrono::milliseconds stream_time) {
  if (quick) return {32ull << 20, stream_time, 50};
  return {1ull << 30, stream_time, 500};
}

// 8-byte pings echoed back, then chunks of kChunk bytes whose first byte says whether another follows; the
// server answers the stream with the byte count it received.
LinkMeasurement measure_link(const std::shared_ptr<gloo::Context>& context, const LinkMeasureSize& size) {
  uint64_t word = 0;
  const auto ping = context->createUnboundBuffer(&word, sizeof word);
  std::vector<double> round_trips;
  for (int i = 0; i < size.pings; ++i) {
    const auto start = Clock::now();
    word = static_cast<uint64_t>(i);
    ping->send(1, kPingSlot);
    ping->waitSend();
    ping->recv(1, kPingSlot);
    ping->waitRecv();
    if (word != static_cast<uint64_t>(i)) throw std::runtime_error("the peer echoed the wrong ping");
    round_trips.push_back(seconds_since(start));
  }
  std::vector<char> chunk(kChunk, '\x5a');
  const auto stream = context->createUnboundBuffer(chunk.data(), chunk.size());
  LinkMeasurement measured;
  const auto start = Clock::now();
  for (bool more = true; more;) {
    measured.bytes += kChunk;
    more = measured.bytes < size.max_bytes && Clock::now() < start + size.max_time;
    chunk[0] = more ? 1 : 0;
    stream->send(1, kStreamSlot);
    stream->waitSend();
  }
  ping->recv(1, kPingSlot);
  ping->waitRecv();
  if (word != measured.bytes) throw std::runtime_error("the peer received a different byte count");
  measured.seconds = seconds_since(start);
  measured.rtt_seconds = median(round_trips);
  return measured;
}

void serve_link(const std::shared_ptr<gloo::Context>& context, const LinkMeasureSize& size) {
  uint64_t word = 0;
  const auto ping = context->createUnboundBuffer(&word, sizeof word);
  for (int i = 0; i < size.pings; ++i) {
    ping->recv(0, kPingSlot);
    ping->waitRecv();
    ping->send(0, kPingSlot);
    ping->waitSend();
  }
  std::vector<char> chunk(kChunk);
  const auto stream = context->createUnboundBuffer(chunk.data(), chunk.size());
  uint64_t received = 0;
  do {
    stream->recv(0, kStreamSlot);
    stream->waitRecv();
    received += kChunk;
  } while (chunk[0] != 0);
  word = received;
  ping->send(0, kPingSlot);
  ping->waitSend();
}

std::vector<CheckResult> grade_link(const LinkMeasurement& measured, const std::string& to, double min_gbps,
                                    double max_rtt_us) {
  const double rate = measured.seconds > 0 ? static_cast<double>(measured.bytes) / measured.seconds : 0;
  const Status bandwidth = grade_at_least(rate * 8 / 1e9, min_gbps, 0);
  const Status latency = grade_at_most(measured.rtt_seconds * 1e6, max_rtt_us, 1e300);
  return {
      make_result(checks::kLinkBandwidth, bandwidth, format_gbits(rate) + " to " + to,
                  ">= " + format_fixed(min_gbps, 0) + " Gbit/s",
                  format_bytes(measured.bytes) + " in " + format_seconds(measured.seconds) +
                      (bandwidth == Status::Ok ? ""
                                               : "; the guides ask for >= 10 Gbit/s between training nodes: "
                                                 "check the interface (--interface), cables and switch")),
      make_result(checks::kLinkRtt, latency, format_seconds(measured.rtt_seconds) + " to " + to,
                  "<= " + format_fixed(max_rtt_us, 0) + " us",
                  latency == Status::Ok ? "median round trip over Gloo"
                                        : "slow round trips stall every all-reduce: are the nodes in one "
                                          "placement group / rack?"),
  };
}

std::vector<std::pair<Peer, Peer>> ring_pairs(const std::vector<Peer>& peers) {
  std::vector<Peer> servers;
  for (const auto& peer : leaders(peers)) {
    if (!peer.data_address.empty()) servers.push_back(peer);
  }
  std::vector<std::pair<Peer, Peer>> pairs;
  if (servers.size() < 2) return pairs;
  for (size_t i = 0; i < servers.size(); ++i) pairs.emplace_back(servers[i], servers[(i + 1) % servers.size()]);
  return pairs;
}

std::vector<CheckResult> check_links(Group& group, const std::vector<Peer>& peers, const LinkSettings& settings,
                                     std::chrono::milliseconds wait_for_the_last) {
  const auto start = Clock::now();
  const auto pairs = ring_pairs(peers);
  std::vector<CheckResult> results;
  if (group.rank() == 0 && pairs.empty()) {
    results.push_back(skipped(checks::kLinkBandwidth, "fewer than two nodes with a usable interface"));
  }
  for (size_t i = 0; i < pairs.size(); ++i) {
    const auto& [client, server] = pairs[i];
    const bool measuring = client.rank == group.rank();
    if (!measuring && server.rank != group.rank()) continue;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        start + settings.per_pair * static_cast<int>(i + 1) - Clock::now());
    try {
      if (measuring && settings.progress) {
        settings.progress("link " + std::to_string(i + 1) + "/" + std::to_string(pairs.size()) + ": " +
                          describe(client) + " -> " + describe(server));
      }
      const auto device = gloo_device(measuring ? client.data_address : server.data_address);
      const auto context = connect_gloo(*group.store(), "link/" + std::to_string(i), measuring ? 0 : 1, 2, device,
                                        std::max(left, std::chrono::milliseconds(1)));
      if (!measuring) {
        serve_link(context, settings.size);
        continue;
      }
      const auto measured =
          grade_link(measure_link(context, settings.size), describe(server), settings.min_gbps, settings.max_rtt_us);
      results.insert(results.end(), measured.begin(), measured.end());
    } catch (const std::exception& e) {
      // The measuring side reports; a server's failure shows there as one.
      if (measuring) {
        results.push_back(
            make_result(checks::kLinkBandwidth, Status::Fail, "no connection", "", failure_text(server, e.what())));
      }
    }
    for (auto& result : results) {
      if (result.rank == CheckResult::kWholeRun && measuring) {
        result.rank = client.rank;
        result.host = client.host;
      }
    }
  }
  group.barrier("links",
                Deadline::after(std::chrono::duration_cast<std::chrono::milliseconds>(
                    start + settings.per_pair * static_cast<int>(pairs.size()) + wait_for_the_last - Clock::now())));
  return results;
}

}  // namespace ddp::doctor
