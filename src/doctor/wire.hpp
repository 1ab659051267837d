#pragma once
// The byte format of messages between ranks: length-prefixed fields, so that any text (results with spaces,
// newlines, binary Gloo addresses) travels unchanged, and a truncated or foreign message is detected.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "doctor/check.hpp"

namespace ddp::doctor {

// A message between ranks was lost, late, or not ours. One line, naming the peer and the phase.
class ExchangeError : public std::runtime_error {
 public:
  explicit ExchangeError(const std::string& message) : std::runtime_error(message) {}
};

class WireWriter {
 public:
  WireWriter& put(std::string_view field);
  WireWriter& put_int(int64_t value);
  const std::string& bytes() const { return bytes_; }

 private:
  std::string bytes_;
};

// Owns the bytes it reads, so that it can be built straight from a received message.
class WireReader {
 public:
  explicit WireReader(std::string bytes) : bytes_(std::move(bytes)) {}
  std::string get();
  int64_t get_int();
  bool done() const { return next_ == bytes_.size(); }

 private:
  std::string bytes_;
  size_t next_ = 0;
};

std::string encode_results(const std::vector<CheckResult>& results);
std::vector<CheckResult> decode_results(std::string_view bytes);

}  // namespace ddp::doctor
