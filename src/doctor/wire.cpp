#include "doctor/wire.hpp"

namespace ddp::doctor {

WireWriter& WireWriter::put(std::string_view field) {
  const uint64_t length = field.size();
  char prefix[8];
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<char>((length >> (8 * i)) & 0xff);
  bytes_.append(prefix, sizeof prefix);
  bytes_.append(field);
  return *this;
}

WireWriter& WireWriter::put_int(int64_t value) { return put(std::to_string(value)); }

std::string WireReader::get() {
  if (bytes_.size() - next_ < 8) throw ExchangeError("malformed message from another rank (truncated field)");
  uint64_t length = 0;
  for (int i = 0; i < 8; ++i) {
    length |= static_cast<uint64_t>(static_cast<unsigned char>(bytes_[next_ + static_cast<size_t>(i)])) << (8 * i);
  }
  next_ += 8;
  if (length > bytes_.size() - next_) throw ExchangeError("malformed message from another rank (field past its end)");
  std::string field = bytes_.substr(next_, length);
  next_ += length;
  return field;
}

int64_t WireReader::get_int() {
  const std::string text = get();
  try {
    size_t used = 0;
    const long long value = std::stoll(text, &used);
    if (used == text.size()) return value;
  } catch (const std::exception&) {
  }
  throw ExchangeError("malformed message from another rank (not a number)");
}

std::string encode_results(const std::vector<CheckResult>& results) {
  WireWriter out;
  out.put_int(static_cast<int64_t>(results.size()));
  for (const auto& r : results) {
    out.put(r.check).put_int(static_cast<int>(r.status)).put(r.value).put(r.threshold).put(r.detail).put(r.host)
        .put_int(r.rank);
  }
  return out.bytes();
}

std::vector<CheckResult> decode_results(std::string_view bytes) {
  WireReader in{std::string(bytes)};
  const int64_t count = in.get_int();
  if (count < 0 || static_cast<uint64_t>(count) > bytes.size()) throw ExchangeError("malformed result list");
  std::vector<CheckResult> results;
  for (int64_t i = 0; i < count; ++i) {
    CheckResult r;
    r.check = in.get();
    const int64_t status = in.get_int();
    if (status < 0 || status > static_cast<int>(Status::Skip)) throw ExchangeError("malformed result status");
    r.status = static_cast<Status>(status);
    r.value = in.get();
    r.threshold = in.get();
    r.detail = in.get();
    r.host = in.get();
    r.rank = static_cast<int>(in.get_int());
    results.push_back(std::move(r));
  }
  return results;
}

}  // namespace ddp::doctor
