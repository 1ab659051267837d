#include "doctor/peers.hpp"

namespace ddp::doctor {
namespace {

std::string encode(const Peer& peer) {
  return WireWriter()
      .put_int(peer.rank)
      .put(peer.host)
      .put_int(peer.leader)
      .put(peer.data_address)
      .put_int(peer.link_port)
      .put_int(peer.storage_ok)
      .bytes();
}

Peer decode(const std::string& bytes) {
  WireReader in(bytes);
  Peer peer;
  peer.rank = static_cast<int>(in.get_int());
  peer.host = in.get();
  peer.leader = in.get_int() != 0;
  peer.data_address = in.get();
  peer.link_port = static_cast<uint16_t>(in.get_int());
  peer.storage_ok = in.get_int() != 0;
  return peer;
}

}  // namespace

std::vector<Peer> exchange_peers(Transport& transport, const Peer& mine, Deadline deadline) {
  std::vector<Peer> peers;
  for (const auto& bytes : all_gather(transport, encode(mine), deadline)) peers.push_back(decode(bytes));
  return peers;
}

std::vector<Peer> leaders(const std::vector<Peer>& peers) {
  std::vector<Peer> found;
  for (const auto& peer : peers) {
    if (peer.leader) found.push_back(peer);
  }
  return found;
}

std::string describe(const Peer& peer) { return "rank " + std::to_string(peer.rank) + " (" + peer.host + ")"; }

}  // namespace ddp::doctor
