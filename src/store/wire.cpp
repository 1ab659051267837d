#include "store/wire.hpp"

#include "base/parse.hpp"

namespace ddp {

WireWriter& WireWriter::put(std::string_view field) {
  const uint64_t length = field.size();
  for (size_t i = 0; i < kFieldPrefix; ++i) bytes_ += static_cast<char>((length >> (8 * i)) & 0xff);
  bytes_.append(field);
  return *this;
}

WireWriter& WireWriter::put_int(int64_t value) { return put(std::to_string(value)); }

std::string WireReader::get() {
  if (bytes_.size() - next_ < kFieldPrefix)
    throw ExchangeError("malformed message from another rank (truncated field)");
  uint64_t length = 0;
  for (size_t i = 0; i < kFieldPrefix; ++i)
    length |= uint64_t{static_cast<unsigned char>(bytes_[next_ + i])} << (8 * i);
  next_ += kFieldPrefix;
  if (length > bytes_.size() - next_) throw ExchangeError("malformed message from another rank (field past its end)");
  std::string field = bytes_.substr(next_, length);
  next_ += length;
  return field;
}

std::string WireReader::get_text() { return printable(get(), kMaxField); }

int64_t WireReader::get_int() {
  const std::optional<int64_t> value = parse_int(get());
  if (!value) throw ExchangeError("malformed message from another rank (not a number)");
  return *value;
}

int64_t WireReader::get_int(int64_t min, int64_t max) {
  const int64_t value = get_int();
  if (value < min || value > max) {
    throw ExchangeError("malformed message from another rank (" + std::to_string(value) + " is not within " +
                        std::to_string(min) + ".." + std::to_string(max) + ")");
  }
  return value;
}

}  // namespace ddp
