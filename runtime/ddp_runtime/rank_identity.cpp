#include "ddp_runtime/rank_identity.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>

#include "netif.hpp"

namespace ddp::runtime {
namespace {

// Host name and device, NUL-separated, per rank: 32k ranks make a 4 MiB all-reduce, once.
constexpr int64_t kIdentityBytes = 128;

}  // namespace

std::vector<RankIdentity> gather_identities(const Distributed& dist) {
  const std::string mine = host_name() + '\0' + dist.device.str();
  at::Tensor table = at::zeros({dist.world_size, kIdentityBytes}, at::kByte);
  auto* row = table[dist.rank].data_ptr<uint8_t>();
  std::copy_n(mine.begin(), std::min<std::size_t>(mine.size(), kIdentityBytes - 1), row);
  if (dist.world_size > 1) all_reduce_sum(dist, table);
  std::vector<RankIdentity> ranks;
  for (int r = 0; r < dist.world_size; ++r) {
    const auto* bytes = reinterpret_cast<const char*>(table[r].data_ptr<uint8_t>());
    const std::size_t host_end = strnlen(bytes, kIdentityBytes);
    const std::size_t device_begin = std::min<std::size_t>(host_end + 1, kIdentityBytes);
    ranks.push_back({std::string(bytes, host_end),
                     std::string(bytes + device_begin, strnlen(bytes + device_begin, kIdentityBytes - device_begin))});
  }
  return ranks;
}

std::string describe_rank(const std::vector<RankIdentity>& ranks, int rank) {
  std::string text = "rank " + std::to_string(rank);
  if (rank < 0 || static_cast<std::size_t>(rank) >= ranks.size()) return text;
  return text + " on " + ranks[rank].host + " (" + ranks[rank].device + ")";
}

}  // namespace ddp::runtime
