#include "doctor/run/wire.hpp"

#include <algorithm>
#include <charconv>

#include "core/parse.hpp"

namespace ddp::doctor {
namespace {

constexpr size_t kPrefix = 8;
constexpr int kResultFields = 7;

}  // namespace

WireWriter& WireWriter::put(std::string_view field) {
  const uint64_t length = field.size();
  for (size_t i = 0; i < kPrefix; ++i) bytes_ += static_cast<char>((length >> (8 * i)) & 0xff);
  bytes_.append(field);
  return *this;
}

WireWriter& WireWriter::put_int(int64_t value) { return put(std::to_string(value)); }

std::string WireReader::get() {
  if (bytes_.size() - next_ < kPrefix) throw ExchangeError("malformed message from another rank (truncated field)");
  uint64_t length = 0;
  for (size_t i = 0; i < kPrefix; ++i) length |= uint64_t{static_cast<unsigned char>(bytes_[next_ + i])} << (8 * i);
  next_ += kPrefix;
  if (length > bytes_.size() - next_) throw ExchangeError("malformed message from another rank (field past its end)");
  std::string field = bytes_.substr(next_, length);
  next_ += length;
  return field;
}

std::string WireReader::get_text() { return printable(get(), kMaxField); }

int64_t WireReader::get_int() {
  const std::string text = get();
  int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size()) {
    throw ExchangeError("malformed message from another rank (not a number)");
  }
  return value;
}

int64_t WireReader::get_int(int64_t min, int64_t max) {
  const int64_t value = get_int();
  if (value < min || value > max) {
    throw ExchangeError("malformed message from another rank (" + std::to_string(value) + " is not within " +
                        std::to_string(min) + ".." + std::to_string(max) + ")");
  }
  return value;
}

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
  const auto most = static_cast<int64_t>(bytes.size() / (kResultFields * kPrefix));
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
  const auto most = std::min<int64_t>(world_size, static_cast<int64_t>(bytes.size() / kPrefix));
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
  if (!in.done()) throw ExchangeError("malformed peer description from another rank");
  return peer;
}

}  // namespace ddp::doctor
