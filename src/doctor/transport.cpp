#include "doctor/transport.hpp"

namespace ddp::doctor {
namespace {

class SoloTransport : public Transport {
 public:
  int rank() const override { return 0; }
  const std::vector<int>& members() const override { return members_; }
  std::string describe() const override { return "single"; }
  void send(int peer, std::string_view, Deadline) override { no_peer(peer); }
  std::string recv(int peer, Deadline) override { no_peer(peer); }

 private:
  [[noreturn]] static void no_peer(int peer) {
    throw ExchangeError("rank " + std::to_string(peer) + " does not exist in a single-process run");
  }
  std::vector<int> members_{0};
};

}  // namespace

namespace {

std::string numbered(uint64_t collective, const std::string& message) {
  return WireWriter().put_int(static_cast<int64_t>(collective)).put(message).bytes();
}

std::string unnumbered(uint64_t collective, int peer, std::string message) {
  WireReader in(std::move(message));
  const int64_t theirs = in.get_int();
  if (theirs != static_cast<int64_t>(collective)) {
    throw ExchangeError("rank " + std::to_string(peer) + " is out of step (exchange " + std::to_string(theirs) +
                        ", expected " + std::to_string(collective) + "): it stopped a check early");
  }
  return in.get();
}

}  // namespace

std::vector<std::string> gather(Transport& transport, const std::string& mine, Deadline deadline) {
  const uint64_t collective = transport.next_collective();
  if (transport.rank() != 0) {
    transport.send(0, numbered(collective, mine), deadline);
    return {};
  }
  std::vector<std::string> all;
  for (const int member : transport.members()) {
    all.push_back(member == 0 ? mine : unnumbered(collective, member, transport.recv(member, deadline)));
  }
  return all;
}

std::string broadcast(Transport& transport, const std::string& from_root, Deadline deadline) {
  const uint64_t collective = transport.next_collective();
  if (transport.rank() != 0) return unnumbered(collective, 0, transport.recv(0, deadline));
  const std::string message = numbered(collective, from_root);
  for (const int member : transport.members()) {
    if (member != 0) transport.send(member, message, deadline);
  }
  return from_root;
}

std::vector<std::string> all_gather(Transport& transport, const std::string& mine, Deadline deadline) {
  const auto gathered = gather(transport, mine, deadline);
  WireWriter packed;
  for (const auto& message : gathered) packed.put(message);
  WireReader reader(broadcast(transport, packed.bytes(), deadline));
  std::vector<std::string> all;
  for (size_t i = 0; i < transport.members().size(); ++i) all.push_back(reader.get());
  if (!reader.done()) throw ExchangeError("all-gather: rank 0 sent more messages than there are members");
  return all;
}

void barrier(Transport& transport, Deadline deadline) {
  gather(transport, "", deadline);
  broadcast(transport, "", deadline);
}

std::unique_ptr<Transport> make_solo_transport() { return std::make_unique<SoloTransport>(); }

}  // namespace ddp::doctor
