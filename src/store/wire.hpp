#pragma once
// The byte format of messages through the project's store (store.hpp): length-prefixed fields, so that any text
// (results with spaces, newlines, binary addresses) travels unchanged. Nothing another process sends is trusted:
// every length is checked against the bytes that are there before anything is allocated, and text from other
// processes is cut to kMaxField bytes of printable ASCII before it is kept.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace ddp {

// A message between ranks was lost, late, malformed or not ours. One line, naming the peer and the step.
class ExchangeError : public std::runtime_error {
 public:
  explicit ExchangeError(const std::string& message) : std::runtime_error(message) {}
};

inline constexpr std::size_t kMaxField = 4096;
inline constexpr std::size_t kFieldPrefix = 8;  // the bytes of a field's length: the least a field takes

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

}  // namespace ddp
