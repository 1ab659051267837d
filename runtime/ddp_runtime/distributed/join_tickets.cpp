#include "ddp_runtime/distributed/join_tickets.hpp"

#include <algorithm>
#include <iterator>

namespace ddp::runtime {

void JoinTickets::look(int64_t taken, Clock::time_point now) {
  for (int64_t ticket = std::max(seen_ + 1, taken - kAwaitedAtMost + 1); ticket <= taken; ++ticket) {
    awaited_.emplace(ticket, now);
  }
  seen_ = std::max(seen_, taken);
  while (static_cast<int64_t>(awaited_.size()) > kAwaitedAtMost) awaited_.erase(awaited_.begin());
}

bool JoinTickets::pending(int64_t taken, const Written& written, Clock::time_point now) {
  look(taken, now);
  for (auto it = awaited_.begin(); it != awaited_.end();) {
    if (written(it->first)) return true;
    it = now - it->second > patience_ ? awaited_.erase(it) : std::next(it);
  }
  return false;
}

// Gives up no ticket: one that pending() found written is taken in, however late the generation forms.
std::vector<int64_t> JoinTickets::take(int64_t taken, const Written& written, Clock::time_point now) {
  look(taken, now);
  std::vector<int64_t> admitted;
  for (auto it = awaited_.begin(); it != awaited_.end();) {
    if (written(it->first)) {
      admitted.push_back(it->first);
      it = awaited_.erase(it);
    } else {
      ++it;
    }
  }
  return admitted;
}

}  // namespace ddp::runtime
