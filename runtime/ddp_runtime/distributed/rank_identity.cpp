#include "ddp_runtime/distributed/rank_identity.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>

#include "core/netif.hpp"

namespace ddp::runtime {
namespace {

// Host name, device and standby endpoint, NUL-separated, per rank: 32k ranks make a 6 MiB all-reduce, once.
constexpr int64_t kIdentityBytes = 192;

// The NUL-terminated field at `offset` of a row, and the offset of the next one.
std::string field(const char* row, std::size_t& offset) {
  const std::size_t begin = std::min<std::size_t>(offset, kIdentityBytes);
  const std::size_t length = strnlen(row + begin, kIdentityBytes - begin);
  offset = begin + length + 1;
  return std::string(row + begin, length);
}

}  // namespace

std::vector<RankIdentity> gather_identities(const Distributed& dist, const std::string& standby) {
  const std::string mine = host_name() + '\0' + dist.device.str() + '\0' + standby;
  at::Tensor table = at::zeros({dist.world_size, kIdentityBytes}, at::kByte);
  auto* row = table[dist.rank].data_ptr<uint8_t>();
  std::copy_n(mine.begin(), std::min<std::size_t>(mine.size(), kIdentityBytes - 1), row);
  if (dist.world_size > 1) all_reduce_sum(dist, table);
  std::vector<RankIdentity> ranks;
  for (int r = 0; r < dist.world_size; ++r) {
    const auto* row = reinterpret_cast<const char*>(table[r].data_ptr<uint8_t>());
    std::size_t offset = 0;
    RankIdentity identity;
    identity.host = field(row, offset);
    identity.device = field(row, offset);
    identity.standby = field(row, offset);
    identity.launch_rank = r;
    ranks.push_back(std::move(identity));
  }
  return ranks;
}

std::string describe_rank(const std::vector<RankIdentity>& ranks, int rank) {
  if (rank < 0 || static_cast<std::size_t>(rank) >= ranks.size()) return "rank " + std::to_string(rank);
  const RankIdentity& identity = ranks[rank];
  return "rank " + std::to_string(identity.launch_rank >= 0 ? identity.launch_rank : rank) + " on " + identity.host +
         " (" + identity.device + ")";
}

}  // namespace ddp::runtime
