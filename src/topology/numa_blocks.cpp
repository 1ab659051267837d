// Blocks of whole cores by NUMA domain (numa_blocks.hpp): the three ways binding.hpp shares cores out, and the
// fewest-crossings placement of equal blocks that the third one needs.
#include "topology/numa_blocks.hpp"

#include <algorithm>
#include <utility>

namespace ddp::binding_detail {
namespace {

// Contiguous blocks of `domain` (each core's domain, in core order) with sizes differing by at most one,
// crossing the fewest domain boundaries: a shortest path over (blocks placed, larger blocks among them),
// O(k * (n mod k)) steps, plain equal blocks beyond a bound. Returns the k + 1 block boundaries.
std::vector<size_t> fewest_crossings(const std::vector<size_t>& domain, size_t k) {
  const size_t n = domain.size(), small = n / k, large_count = n % k;
  std::vector<size_t> crossings_before(n, 0);  // domain changes in cores[0..i]
  for (size_t i = 1; i < n; ++i) crossings_before[i] = crossings_before[i - 1] + (domain[i] != domain[i - 1]);
  const auto cost = [&](size_t begin, size_t size) {
    return crossings_before[begin + size - 1] - crossings_before[begin];
  };
  constexpr size_t kFar = static_cast<size_t>(-1);
  constexpr size_t kMaxSteps = size_t{1} << 22;  // bounds the work per task on a node of thousands of cores
  const size_t width = large_count + 1;
  if ((k + 1) * width > kMaxSteps) {
    std::vector<size_t> starts;
    for (size_t t = 0; t <= k; ++t) starts.push_back(t * n / k);
    return starts;
  }
  std::vector<size_t> best(width * (k + 1), kFar);
  std::vector<bool> came_by_large(width * (k + 1), false);
  best[0] = 0;
  for (size_t placed = 0; placed < k; ++placed) {
    for (size_t large = 0; large <= std::min(placed, large_count); ++large) {
      const size_t here = best[placed * width + large];
      if (here == kFar) continue;
      const size_t begin = placed * small + large;
      for (const bool is_large : {false, true}) {
        const size_t next_large = large + is_large;
        if (next_large > large_count || placed + 1 - next_large > k - large_count) continue;
        const size_t total = here + cost(begin, small + is_large);
        size_t& slot = best[(placed + 1) * width + next_large];
        if (total < slot) {
          slot = total;
          came_by_large[(placed + 1) * width + next_large] = is_large;
        }
      }
    }
  }
  std::vector<size_t> sizes(k);
  for (size_t placed = k, large = large_count; placed > 0; --placed) {
    const bool is_large = came_by_large[placed * width + large];
    sizes[placed - 1] = small + is_large;
    large -= is_large;
  }
  std::vector<size_t> starts{0};
  for (size_t size : sizes) starts.push_back(starts.back() + size);
  return starts;
}

}  // namespace

NumaDomains::NumaDomains(const NodeHardware& hw) : domain_of_core_(hw.cores.size(), kNone) {
  std::vector<size_t> seen;
  for (const NumaNode& node : hw.numa_nodes) {
    if (std::find(seen.begin(), seen.end(), node.locality) != seen.end()) continue;
    seen.push_back(node.locality);
    for (size_t core : hw.localities[node.locality].cores) {
      if (domain_of_core_[core] == kNone) domain_of_core_[core] = names_.size();
    }
    names_.push_back(node.os_index);
  }
}

std::string NumaDomains::name(size_t domain) const {
  return domain == kNone ? "no NUMA node" : "NUMA node " + std::to_string(names_[domain]);
}

std::string NumaDomains::names(const std::vector<size_t>& domains) const {
  if (domains.size() == 1) return name(domains.front());
  std::string text = "NUMA nodes ";
  for (size_t i = 0; i < domains.size(); ++i) {
    text += (i ? "," : "") + (domains[i] == kNone ? std::string("none") : std::to_string(names_[domains[i]]));
  }
  return text;
}

CoreBlocks split_by_domain(const std::vector<size_t>& cores, size_t k, const NumaDomains& numa) {
  std::vector<size_t> domains;                    // in order of first appearance
  std::vector<std::vector<size_t>> domain_cores;  // beside domains
  for (size_t c : cores) {
    const auto found = std::find(domains.begin(), domains.end(), numa.of(c));
    if (found == domains.end()) {
      domains.push_back(numa.of(c));
      domain_cores.push_back({c});
    } else {
      domain_cores[static_cast<size_t>(found - domains.begin())].push_back(c);
    }
  }
  const size_t d = domains.size();
  CoreBlocks out;
  const auto fits = [&] {
    for (const auto& in_domain : domain_cores) {
      if (in_domain.size() < k / d) return false;
    }
    return true;
  };
  if (k % d == 0 && fits()) {
    for (size_t i = 0; i < d; ++i) {
      const size_t per = k / d, n = domain_cores[i].size();
      for (size_t j = 0; j < per; ++j) {
        out.blocks.emplace_back(domain_cores[i].begin() + static_cast<long>(j * n / per),
                                domain_cores[i].begin() + static_cast<long>((j + 1) * n / per));
        out.rules.push_back((domains[i] == NumaDomains::kNone ? "whole cores in " : "whole cores of ") +
                            numa.name(domains[i]) + (per > 1 ? ", split " + std::to_string(per) + " ways" : ""));
      }
    }
    return out;
  }
  if (d % k == 0) {
    for (size_t t = 0; t < k; ++t) {
      std::vector<size_t> block, names;
      for (size_t i = t * (d / k); i < (t + 1) * (d / k); ++i) {
        block.insert(block.end(), domain_cores[i].begin(), domain_cores[i].end());
        names.push_back(domains[i]);
      }
      out.blocks.push_back(std::move(block));
      out.rules.push_back("whole " + numa.names(names));
    }
    return out;
  }
  std::vector<size_t> ordered, domain_of;
  for (size_t i = 0; i < d; ++i) {
    ordered.insert(ordered.end(), domain_cores[i].begin(), domain_cores[i].end());
    domain_of.insert(domain_of.end(), domain_cores[i].size(), i);
  }
  const std::vector<size_t> starts = fewest_crossings(domain_of, k);
  for (size_t t = 0; t < k; ++t) {
    out.blocks.emplace_back(ordered.begin() + static_cast<long>(starts[t]),
                            ordered.begin() + static_cast<long>(starts[t + 1]));
    std::vector<size_t> names;
    for (size_t i = starts[t]; i < starts[t + 1]; ++i) {
      if (names.empty() || names.back() != domains[domain_of[i]]) names.push_back(domains[domain_of[i]]);
    }
    out.rules.push_back("an equal share of whole cores (" + std::to_string(k) + " tasks fit neither way on " +
                        std::to_string(d) + " NUMA domains; fewest boundaries crossed), " + numa.names(names));
  }
  return out;
}

}  // namespace ddp::binding_detail
