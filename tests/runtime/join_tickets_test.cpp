// Rank 0's account of the replacements' requests to join (join_tickets.hpp): a ticket whose request is never written
// (its replacement died between taking it and writing) holds up no later one and calls for no regroup, and is given
// up after the patience. Tickets and requests are played here as replacements and rank 0's store would make them.
#include "ddp_runtime/distributed/join_tickets.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <set>
#include <vector>

namespace ddp::runtime {
namespace {

using std::chrono::seconds;
using Tickets = std::vector<int64_t>;

// The requests written so far, by ticket.
struct Requests {
  std::set<int64_t> written;
  JoinTickets::Written view() const {
    return [this](int64_t ticket) { return written.count(ticket) > 0; };
  }
};

const JoinTickets::Clock::time_point t0{};

TEST(JoinTickets, AWrittenRequestIsTakenInOnce) {
  JoinTickets tickets(seconds(5));
  Requests requests;
  EXPECT_FALSE(tickets.pending(0, requests.view(), t0));
  requests.written = {1};
  EXPECT_TRUE(tickets.pending(1, requests.view(), t0));
  EXPECT_EQ(tickets.take(1, requests.view(), t0), Tickets{1});
  EXPECT_FALSE(tickets.pending(1, requests.view(), t0 + seconds(1)));
  EXPECT_EQ(tickets.take(1, requests.view(), t0 + seconds(1)), Tickets{});
}

// Ticket 2's replacement died before it wrote its request; ticket 3's request is written: 3 is taken in at once.
TEST(JoinTickets, AnUnwrittenTicketHoldsUpNoLaterOne) {
  JoinTickets tickets(seconds(5));
  Requests requests{{1}};
  EXPECT_EQ(tickets.take(1, requests.view(), t0), Tickets{1});
  requests.written = {1, 3};
  EXPECT_TRUE(tickets.pending(3, requests.view(), t0 + seconds(1)));
  EXPECT_EQ(tickets.take(3, requests.view(), t0 + seconds(1)), Tickets{3});
}

// A ticket taken and not yet written calls for no regroup; once its request is written, the next look takes it in.
TEST(JoinTickets, ARequestWrittenLateIsTakenInOnceWritten) {
  JoinTickets tickets(seconds(5));
  Requests requests;
  EXPECT_FALSE(tickets.pending(1, requests.view(), t0));
  EXPECT_EQ(tickets.take(1, requests.view(), t0), Tickets{});  // a generation formed after a failure meanwhile
  EXPECT_FALSE(tickets.pending(1, requests.view(), t0 + seconds(1)));
  requests.written = {1};
  EXPECT_TRUE(tickets.pending(1, requests.view(), t0 + seconds(2)));
  EXPECT_EQ(tickets.take(1, requests.view(), t0 + seconds(2)), Tickets{1});
  EXPECT_FALSE(tickets.pending(1, requests.view(), t0 + seconds(3)));
}

// Still unwritten when looked at after the patience, a ticket is given up: its request, written at last, is not
// taken in (its replacement's wait to be admitted ends with an error); later tickets are.
TEST(JoinTickets, AnUnwrittenTicketIsGivenUpAfterThePatience) {
  JoinTickets tickets(seconds(5));
  Requests requests;
  EXPECT_EQ(tickets.take(1, requests.view(), t0), Tickets{});
  EXPECT_FALSE(tickets.pending(1, requests.view(), t0 + seconds(6)));
  requests.written = {1};
  EXPECT_FALSE(tickets.pending(1, requests.view(), t0 + seconds(7)));
  EXPECT_EQ(tickets.take(1, requests.view(), t0 + seconds(7)), Tickets{});
  requests.written = {1, 2};
  EXPECT_TRUE(tickets.pending(2, requests.view(), t0 + seconds(8)));
  EXPECT_EQ(tickets.take(2, requests.view(), t0 + seconds(8)), Tickets{2});
}

// Written by the time it is looked at, a ticket is taken in however long it was awaited: its replacement lives.
TEST(JoinTickets, ARequestFoundWrittenAfterThePatienceIsTakenIn) {
  JoinTickets tickets(seconds(5));
  Requests requests;
  EXPECT_EQ(tickets.take(1, requests.view(), t0), Tickets{});
  requests.written = {1};
  EXPECT_TRUE(tickets.pending(1, requests.view(), t0 + seconds(9)));
  EXPECT_EQ(tickets.take(1, requests.view(), t0 + seconds(9)), Tickets{1});
}

// Anyone who reaches rank 0's store can move the ticket counter: moved to 2^40, one look awaits the newest tickets
// only (it used to await every one, and rank 0 hung), and a request written under the newest is still taken in.
TEST(JoinTickets, ACounterMovedFarAheadIsLookedAtInBoundedWork) {
  JoinTickets tickets(seconds(5));
  Requests requests;
  const int64_t far = int64_t{1} << 40;
  int64_t asked = 0;
  const JoinTickets::Written counting = [&](int64_t ticket) {
    ++asked;
    return requests.written.count(ticket) > 0;
  };
  EXPECT_FALSE(tickets.pending(far, counting, t0));
  EXPECT_LE(asked, JoinTickets::kAwaitedAtMost);
  requests.written.insert(far + 1);
  EXPECT_EQ(tickets.take(far + 1, requests.view(), t0 + seconds(1)), Tickets{far + 1});
  // A ticket far below the newest is not awaited: its request, written now, is not taken in.
  requests.written.insert(far - 1000);
  EXPECT_EQ(tickets.take(far + 1, requests.view(), t0 + seconds(2)), Tickets{});
}

}  // namespace
}  // namespace ddp::runtime
