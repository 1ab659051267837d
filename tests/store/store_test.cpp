// The project's store (store/store.hpp) as c10d's Store uses it: its operations, clients without rank slots, and the
// limits that keep anyone from growing the hosting process's memory, each performed against a real server on
// 127.0.0.1. The attacks of strangers and of a server that cannot prove the key are in tests/doctor/store_test.cpp.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "store/store.hpp"
#include "test_common.hpp"

namespace ddp {
namespace {

using namespace std::chrono_literals;
using testing::contains;
using testing::error_of;

constexpr char kKey[] = "0123456789abcdef0123456789abcdef";

// A server as ddp-train's stores are: no rank slots, the run named, the job's key.
Admission any_rank(const std::string& run_id = "4711.0") { return Admission{run_id, 0, kKey, false}; }

StoreClient client_of(const StoreServer& server, int rank = kAnyRank, const std::string& key = kKey) {
  return StoreClient("127.0.0.1", server.port(), Greeting{"4711.0", 0, rank, key}, 2s);
}

Deadline soon() { return Deadline::after(2s); }

TEST(Store, ServesTheOperationsOfC10dsStore) {
  StoreServer server("127.0.0.1", 0, any_rank());
  StoreClient store = client_of(server);
  store.set("a", "1", soon());
  store.set("a", "one", soon());  // set overwrites, as c10d's does
  EXPECT_EQ(store.get("a", "reading a", soon()), "one");
  EXPECT_EQ(store.add("n", 5, soon()), 5);  // an absent key counts from 0
  EXPECT_EQ(store.add("n", -2, soon()), 3);
  EXPECT_EQ(store.add("n", 0, soon()), 3);
  // compare-and-set as c10d's TCPStore answers it.
  EXPECT_EQ(store.compare_set("c", "", "first", soon()), "first");        // absent, nothing expected: set
  EXPECT_EQ(store.compare_set("c", "other", "second", soon()), "first");  // not what is there: unchanged
  EXPECT_EQ(store.compare_set("c", "first", "second", soon()), "second");
  EXPECT_EQ(store.compare_set("absent", "x", "y", soon()), "x");  // absent but something expected: not set
  EXPECT_FALSE(store.check({"absent"}, soon()));
  EXPECT_TRUE(store.check({"a", "n", "c"}, soon()));
  EXPECT_FALSE(store.check({"a", "absent"}, soon()));
  EXPECT_EQ(store.key_count(soon()), 3);
  EXPECT_TRUE(store.remove("a", soon()));
  EXPECT_FALSE(store.remove("a", soon()));
  EXPECT_EQ(store.key_count(soon()), 2);
  EXPECT_EQ(error_of([&] { store.get("a", "reading a", Deadline::after(200ms)); }), "reading a: timed out");
}

// wait() returns once every key is set, by another client, or false at its deadline.
TEST(Store, WaitEndsWhenTheLastKeyIsSetOrAtItsDeadline) {
  StoreServer server("127.0.0.1", 0, any_rank());
  StoreClient waiter = client_of(server, 0);
  StoreClient setter = client_of(server, 1);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(waiter.wait({"x", "y"}, Deadline::after(200ms)));
  EXPECT_GE(std::chrono::steady_clock::now() - start, 200ms);
  std::thread later([&] {
    std::this_thread::sleep_for(100ms);
    setter.set("x", "1", soon());
    setter.set("y", "2", soon());
  });
  EXPECT_TRUE(waiter.wait({"x", "y"}, Deadline::after(10s)));
  later.join();
}

// ddp-train's stores: a rank connects again after a failure, a replacement has no rank yet, the group changes size.
// The run and the key still decide.
TEST(Store, WithoutRankSlotsAnyNumberOfClientsOfTheRunConnectAndOnlyThey) {
  StoreServer server("127.0.0.1", 0, any_rank());
  StoreClient first = client_of(server, 1);
  StoreClient again = client_of(server, 1);
  StoreClient replacement = client_of(server, kAnyRank);
  first.set("k", "v", soon());
  EXPECT_EQ(replacement.get("k", "reading k", soon()), "v");
  const Greeting of_another_run{"4712.0", 0, 1, kKey};
  const std::string other_run = error_of([&] { StoreClient("127.0.0.1", server.port(), of_another_run, 2s); });
  EXPECT_TRUE(contains(other_run, "it belongs to run 4712.0, this is run 4711.0")) << other_run;
  const std::string no_key = error_of([&] { client_of(server, 1, std::string(32, 'f')); });
  EXPECT_TRUE(contains(no_key, "cannot prove")) << no_key;
  EXPECT_EQ(again.key_count(soon()), 1) << "the refused clients set nothing";
}

// A server without rank slots admits at most max_clients at once; one that leaves makes room.
TEST(StoreLimits, AServerWithoutRankSlotsAdmitsItsMostClientsAtOnce) {
  Admission admission = any_rank();
  admission.max_clients = 2;
  StoreServer server("127.0.0.1", 0, admission);
  StoreClient first = client_of(server);
  {
    StoreClient second = client_of(server);
    const std::string refused = error_of([&] { client_of(server); });
    EXPECT_TRUE(contains(refused, "the store has 2 clients already")) << refused;
  }
  // The server sees the second connection end a moment after its client is gone.
  std::string error = "not tried";
  for (int attempt = 0; attempt < 100 && !error.empty(); ++attempt) {
    error = error_of([&] { client_of(server).set("k", "v", soon()); });
    if (!error.empty()) std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(error, "");
}

// Every key costs its bytes and kEntryBytes; deleting gives them back.
TEST(StoreLimits, EveryKeyCountsItsBytesAndItsCost) {
  StoreServer server("127.0.0.1", 0, any_rank());
  StoreClient store = client_of(server);
  store.set("key", std::string(1000, 'v'), soon());
  EXPECT_EQ(server.stored_bytes(), 3 + 1000 + kEntryBytes);
  store.set("key", "short", soon());
  EXPECT_EQ(server.stored_bytes(), 3 + 5 + kEntryBytes);
  store.remove("key", soon());
  EXPECT_EQ(server.stored_bytes(), 0u);
}

// A client holding the key that sets value after value is cut off at the store's size: the store keeps what it had
// and serves the others.
TEST(StoreLimits, LargeValuesStopAtTheStoresSizeAndTheStoreServesTheOthers) {
  StoreServer server("127.0.0.1", 0, any_rank());
  StoreClient flood = client_of(server);
  StoreClient other = client_of(server);
  const std::string value(8u << 20, 'x');
  size_t taken = 0;
  const std::string error = error_of([&] {
    for (;; ++taken) flood.set("big/" + std::to_string(taken), value, Deadline::after(10s));
  });
  // Each costs its value, its key ("big/N") and kEntryBytes.
  EXPECT_EQ(taken, kMaxStoreBytes / (value.size() + 6 + kEntryBytes)) << error;
  EXPECT_LE(server.stored_bytes(), kMaxStoreBytes);
  other.remove("big/0", soon());
  other.set("still", "serving", soon());
  EXPECT_EQ(other.get("still", "reading back", soon()), "serving");
}

// Small keys cost more than their bytes: one connection makes at most kMaxKeysPerClient of them.
TEST(StoreLimits, OneClientMakesAtMostItsShareOfKeys) {
  StoreServer server("127.0.0.1", 0, any_rank());
  StoreClient flood = client_of(server);
  size_t made = 0;
  error_of([&] {
    for (;; ++made) flood.set(std::to_string(made), "", soon());
  });
  EXPECT_EQ(made, kMaxKeysPerClient);
  StoreClient other = client_of(server);
  EXPECT_EQ(other.key_count(soon()), static_cast<int64_t>(kMaxKeysPerClient));
  other.set("mine", "1", soon());
  EXPECT_TRUE(other.check({"mine"}, soon()));
}

// A number that is not one, or a sum past 64 bits, ends that connection only.
TEST(StoreLimits, AddToTextOrPastTheRangeEndsThatConnectionOnly) {
  StoreServer server("127.0.0.1", 0, any_rank());
  StoreClient store = client_of(server);
  store.set("text", "abc", soon());
  EXPECT_TRUE(contains(error_of([&] { store.add("text", 1, soon()); }), "adding to text"));
  StoreClient other = client_of(server);
  other.add("big", INT64_MAX, soon());
  EXPECT_TRUE(contains(error_of([&] { other.add("big", 1, soon()); }), "adding to big"));
  StoreClient third = client_of(server);
  EXPECT_EQ(third.get("text", "reading text", soon()), "abc");
}

// The hosting process's address space, in bytes (/proc/self/status VmSize).
size_t address_space_used() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmSize:", 0) == 0) return std::stoul(line.substr(7)) * 1024;
  }
  return 0;
}

// Each admitted connection has a thread of its own. Where the process can have no more (its limits; here an address
// space too small for one more thread's stack), the connection is closed, its client is told, and the store serves the
// next one once threads can be had again: the hosting rank does not end.
TEST(StoreLimits, AConnectionWithNoThreadToServeItIsClosedAndTheStoreGoesOn) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer reserves more address space than any limit this test sets";
#endif
  StoreServer server("127.0.0.1", 0, any_rank());
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_AS, &saved), 0);
  // 4 MiB to spare: less than a thread's stack (8 MiB), enough for what the client allocates.
  const rlimit tight{address_space_used() + (4u << 20), saved.rlim_max};
  ASSERT_EQ(setrlimit(RLIMIT_AS, &tight), 0);
  // Clients that stay connected, each holding its server thread: a stack glibc kept from an ended thread (up to 40
  // MiB of them) serves one without new memory, so the first clients may still be served.
  std::vector<StoreClient> connected;
  connected.reserve(8);
  std::string refused;
  for (int i = 0; i < 8 && refused.empty(); ++i) {
    refused = error_of([&] { connected.push_back(client_of(server)); });
  }
  ASSERT_EQ(setrlimit(RLIMIT_AS, &saved), 0);
  EXPECT_FALSE(refused.empty()) << "8 connections were served with no room for a thread's stack";
  StoreClient store = client_of(server);
  store.set("after", "served", soon());
  EXPECT_EQ(store.get("after", "reading after", soon()), "served");
}

}  // namespace
}  // namespace ddp
