#pragma once
// The byte format of messages between doctor ranks: length-prefixed fields, so that any text (results with
// spaces, newlines, binary addresses) travels unchanged. Nothing another process sends is trusted: every length
// is checked against the bytes that are there and every count against what the caller allows before anything is
// allocated, and text from other ranks is cut to kMaxField bytes of printable ASCII before it is kept.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "doctor/checks/check.hpp"

namespace ddp::doctor {

// A message between ranks was lost, late, malformed or not ours. One line, naming the peer and the step.
class ExchangeError : public std::runtime_error {
 public:
  explicit ExchangeError(const std::string& message) : std::runtime_error(message) {}
};

inline constexpr size_t kMaxField = 4096;

class WireWriter {
 public:
  WireWriter& put(std::string_view field);
  WireWriter& put_int(int64_t value);
  const std::string& bytes() const { return bytes_; }

 private:
  std::string bytes_;
};

// Owns the bytes it reads, so that it can be built straight from a received message. Throws ExchangeError.
class WireReader {
 public:
  explicit WireReader(std::string bytes) : bytes_(std::move(bytes)) {}
  std::string get();
  std::string get_text();  // get(), made printable and cut to kMaxField
  int64_t get_int();
  int64_t get_int(int64_t min, int64_t max);
  bool done() const { return next_ == bytes_.size(); }

 private:
  std::string bytes_;
  size_t next_ = 0;
};

std::string encode_results(const std::vector<CheckResult>& results);
std::vector<CheckResult> decode_results(std::string bytes);

// Rank 0's list of the ranks that joined: ascending, from 0, with `rank` among them, of a run of `world_size`.
std::string encode_members(const std::vector<int>& members);
std::vector<int> decode_members(std::string bytes, int world_size, int rank);

// What every rank tells the others before the cross-node checks: where it runs and how to reach it.
struct Peer {
  int rank = 0;
  std::string host;
  bool leader = false;       // LOCAL_RANK 0: runs the node's checks and speaks for it in node-pair tests
  std::string data_address;  // address of its chosen interface; empty when that interface failed its check
  bool storage_ok = false;   // its snapshot directory passed storage.dir
};
std::string encode_peer(const Peer& peer);
Peer decode_peer(std::string bytes);

}  // namespace ddp::doctor
