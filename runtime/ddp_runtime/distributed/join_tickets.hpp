#pragma once
// Rank 0's account of the replacements' requests to join (recovery.hpp). A replacement takes a ticket (it adds 1 to
// a counter at rank 0's standby store) and then writes its request under that ticket; rank 0 takes in every written
// request when a generation forms. A replacement that dies between the two leaves a ticket that is never written.
// Such a ticket must neither hold up the tickets after it (each request is taken in once it is written) nor call the
// ranks to a regroup at every step boundary (only a written request does): it is awaited for `patience` from when
// rank 0 first looked at it (a replacement writes its request right after taking the ticket), then given up. A
// request written after that is not taken in: its replacement's wait to be admitted times out, and it says so.
// Whoever reaches rank 0's store can move the counter: at most kAwaitedAtMost tickets are awaited at once (the
// newest), so a counter moved by 2^40 costs one look of that many, not 2^40 (a run has as many replacements at once
// as tasks failed, a few).
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <vector>

namespace ddp::runtime {

class JoinTickets {
 public:
  using Clock = std::chrono::steady_clock;
  // Whether the request under a ticket is written.
  using Written = std::function<bool(int64_t ticket)>;

  static constexpr int64_t kAwaitedAtMost = 64;

  explicit JoinTickets(Clock::duration patience) : patience_(patience) {}

  // Whether a generation formed `now` would take someone in: a request written under a ticket taken since the last
  // look (the counter is at `taken`) or under one still awaited. Tickets awaited for longer than the patience are
  // given up here.
  bool pending(int64_t taken, const Written& written, Clock::time_point now);
  // The tickets whose requests are written, in the order taken, to be taken in now, each once; the others up to
  // `taken` stay awaited.
  std::vector<int64_t> take(int64_t taken, const Written& written, Clock::time_point now);

 private:
  // Awaits the tickets taken since the last look, from `now`: the newest kAwaitedAtMost of all awaited.
  void look(int64_t taken, Clock::time_point now);

  Clock::duration patience_;
  int64_t seen_ = 0;                              // tickets 1..seen_ have been looked at
  std::map<int64_t, Clock::time_point> awaited_;  // unwritten when looked at: since when
};

}  // namespace ddp::runtime
