#include "doctor/run/wire.hpp"

#include <algorithm>
#include <charconv>

#include "base/parse.hpp"

namespace ddp::doctor {
namespace {

constexpr int kResultFields = 7;

}  // namespace

std::string encode_results(const std::vector<CheckResult>& results) {
  WireWriter out;
  out.put_int(static_cast<int64_t>(results.size()));
  for (const auto& r : results) {
    out.put(r.check)
        .put_int(static_cast<int>(r.status))
        .put(r.value)
        .put(r.threshold)
        .put(r.detail)
        .put(r.host)
        .put_int(r.rank);
  }
  return out.bytes();
}

std::vector<CheckResult> decode_results(std::string bytes) {
  // Every result takes at least its fields' length prefixes: no count beyond that can be honest.
  const auto most = static_cast<int64_t>(bytes.size() / (kResultFields * kFieldPrefix));
  WireReader in(std::move(bytes));
  const int64_t count = in.get_int(0, most);
  std::vector<CheckResult> results;
  for (int64_t i = 0; i < count; ++i) {
    CheckResult r;
    r.check = in.get_text();
    r.status = static_cast<Status>(in.get_int(0, static_cast<int>(Status::Skip)));
    r.value = in.get_text();
    r.threshold = in.get_text();
    r.detail = in.get_text();
    r.host = in.get_text();
    r.rank = static_cast<int>(in.get_int(CheckResult::kWholeRun, INT32_MAX));
    results.push_back(std::move(r));
  }
  if (!in.done()) throw ExchangeError("malformed result list from another rank (bytes after its end)");
  return results;
}

std::string encode_members(const std::vector<int>& members) {
  WireWriter out;
  out.put_int(static_cast<int64_t>(members.size()));
  for (const int member : members) out.put_int(member);
  return out.bytes();
}

std::vector<int> decode_members(std::string bytes, int world_size, int rank) {
  const auto most = std::min<int64_t>(world_size, static_cast<int64_t>(bytes.size() / kFieldPrefix));
  WireReader in(std::move(bytes));
  std::vector<int> members(static_cast<size_t>(in.get_int(1, most)));
  for (int& member : members) member = static_cast<int>(in.get_int(0, world_size - 1));
  if (!in.done() || !std::is_sorted(members.begin(), members.end()) || members.front() != 0) {
    throw ExchangeError("rank 0 sent a malformed list of members");
  }
  if (!std::binary_search(members.begin(), members.end(), rank)) {
    throw ExchangeError("rank 0 stopped waiting for the other ranks before rank " + std::to_string(rank) + " joined");
  }
  return members;
}

std::string encode_peer(const Peer& peer) {
  return WireWriter()
      .put_int(peer.rank)
      .put(peer.host)
      .put_int(peer.leader)
      .put(peer.data_address)
      .put_int(peer.storage_ok)
      .put(peer.facts.rdma_ports)
      .put(peer.facts.nccl_ib_hca)
      .put(peer.facts.interface)
      .put(peer.facts.master_ip)
      .put(peer.facts.ephemeral)
      .bytes();
}

Peer decode_peer(std::string bytes) {
  WireReader in(std::move(bytes));
  Peer peer;
  peer.rank = static_cast<int>(in.get_int(0, INT32_MAX));
  peer.host = in.get_text();
  peer.leader = in.get_int(0, 1) != 0;
  peer.data_address = in.get_text();
  peer.storage_ok = in.get_int(0, 1) != 0;
  peer.facts.rdma_ports = in.get_text();
  peer.facts.nccl_ib_hca = in.get_text();
  peer.facts.interface = in.get_text();
  peer.facts.master_ip = in.get_text();
  peer.facts.ephemeral = in.get_text();
  if (!in.done()) throw ExchangeError("malformed peer description from another rank");
  return peer;
}

}  // namespace ddp::doctor
