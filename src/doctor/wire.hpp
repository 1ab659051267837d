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

#include "doctor/check.hpp"

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

}  // namespace ddp::doctor
