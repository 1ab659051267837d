#pragma once
// The project's store: the key-value store ranks meet through, one server and one client. ddp-doctor's rank 0 serves
// it on MASTER_PORT (reaching it is also the master-port check; the doctor's exchanges, group.hpp, and Gloo's
// rendezvous, gloo.hpp, are keys in it); its operations are those of c10d's Store (set, get, add, compare-and-set,
// delete, check, wait, the number of keys), so that ddp-train's process groups can meet through it too.
//
// Nothing a peer sends is trusted: each connection has a thread of its own, so a stranger that connects and stays
// silent delays nobody and is dropped after kGreetingWait; a greeting must name this run (and, where the server
// keeps rank slots, its size and a free rank); frames, the keys one connection makes, the store's size and the
// number of connections are bounded, so that nobody can grow the hosting process's memory past them.
//
// Anyone who reads squeue knows the run id and size, and anyone on the network can reach the port. So the greeting
// is a challenge and response under the job's key (DDP_JOB_KEY, which only the job's environment holds): each side
// sends a random nonce, and each proves it knows the key with an HMAC-SHA-256 over both nonces and the run
// (base/hmac.hpp), before a single key is read or written.
// A client that cannot prove it takes no rank slot and can set no key; one that is slow to prove it holds only one of
// kMaxPending places, the oldest of which a new connection takes: strangers never fill the server. The client, too,
// refuses a server that cannot prove it (another program on the port). Without a key (a launch outside srun --ddp)
// the proofs are ones anyone could compute, as the run had nothing secret to prove.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "base/socket.hpp"
#include "store/wire.hpp"

namespace ddp {

inline constexpr size_t kMaxFrame = 16u << 20;  // one request or reply
// All keys and values together, each key counted kEntryBytes more for what keeping it costs the server.
inline constexpr size_t kMaxStoreBytes = 256u << 20;
inline constexpr size_t kEntryBytes = 64;
inline constexpr size_t kMaxKeysPerClient = 1u << 16;  // keys one connection may create
// Connections admitted at once by a server without rank slots (one with them admits each rank once).
inline constexpr size_t kMaxClients = 4096;
inline constexpr auto kGreetingWait = std::chrono::seconds(2);

int64_t wall_clock_ns();  // CLOCK_REALTIME

inline constexpr size_t kMaxPending = 64;  // connections not yet admitted, at most

// What a client says first: this run's id (TORCHELASTIC_RUN_ID), its size and the client's rank (kAnyRank at a
// server without rank slots); what it proves its greeting with: the job's key (empty: none).
inline constexpr int kAnyRank = -1;
struct Greeting {
  std::string run_id;
  int world_size = 1;
  int rank = 0;
  std::string job_key;
};

// Whom a server admits: clients of `run_id` that prove `job_key`. With rank slots (ddp-doctor's meeting) each rank of
// `world_size` once, whose arrival wait_for_ranks reports; without (ddp-train's stores, where a rank connects again
// after a failure and a replacement has no rank yet), any number of clients of any rank and size.
struct Admission {
  std::string run_id;
  int world_size = 1;
  std::string job_key;
  bool rank_slots = true;
  size_t max_clients = kMaxClients;  // without rank slots
};

// The proof of a greeting's side ("server" or "client") over its fields: HMAC-SHA-256 under `job_key`, in hex.
std::string greeting_proof(const std::string& job_key, const std::string& side, const std::vector<std::string>& fields);

class StoreServer {
 public:
  // Listens on `port` of every address (0: one the kernel picks), with rank slots; throws NetError. Clients must
  // prove `job_key` (empty: none).
  StoreServer(uint16_t port, std::string run_id, int world_size, std::string job_key = "");
  // Listens on `port` of `host` (empty: every address).
  StoreServer(const std::string& host, uint16_t port, Admission admission);
  ~StoreServer();  // ends every connection
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  uint16_t port() const { return port_; }
  // The ranks whose greeting was accepted, ascending, once all have come or at `deadline`.
  std::vector<int> wait_for_ranks(Deadline deadline);
  // Until every rank but 0 has closed its connection (it read all it wanted), or `deadline`.
  void wait_for_ranks_to_leave(Deadline deadline);
  // The bytes its keys and values take, as kMaxStoreBytes counts them.
  size_t stored_bytes();

 private:
  struct Client;  // what one admitted connection has made
  void accept_connections();
  void serve(Socket socket);
  bool admit(const Socket& socket, int& rank);  // false after a refusal
  // The reply to one request; throws ExchangeError where the connection must end (not a request, over a limit).
  std::string answer(WireReader& request, Client& client);
  std::string wait_for_keys(const std::vector<std::string>& keys, std::chrono::milliseconds wait);
  void store(const std::string& key, std::string value, Client& client);  // with mutex_ held

  Socket listener_;
  uint16_t port_;
  Admission admission_;
  std::mutex mutex_;  // guards everything below
  std::condition_variable changed_;
  std::map<std::string, std::string> values_;
  size_t stored_bytes_ = 0;
  std::set<int> joined_;             // with rank slots
  int connected_ranks_ = 0;          // other than 0, with rank slots
  size_t clients_ = 0;               // admitted connections
  std::set<int> connections_;        // their descriptors, shut down when the server stops
  std::map<int, uint64_t> pending_;  // descriptors not yet admitted, with their order of arrival
  uint64_t arrivals_ = 0;
  size_t threads_ = 0;  // the acceptor's and the connections'
  bool stopping_ = false;
};

class StoreClient {
 public:
  // Connects to `host`:`port`, retrying for `timeout` while nothing listens there yet, and greets, waiting up to
  // kGreetingWait (or `timeout` where that is less) for each answer. Throws ExchangeError naming the address, how
  // long it tried and why, rank 0's reason to refuse, or that the server could not prove the job's key.
  StoreClient(const std::string& host, uint16_t port, const Greeting& greeting, std::chrono::milliseconds timeout);

  // Every call throws ExchangeError naming the server and what failed; one whose reply did not come leaves the
  // connection out of step, and every later call fails at once.
  void set(const std::string& key, const std::string& value, Deadline deadline);
  // Waits for `key` to be set; `waiting_for` starts the error's message ("waiting for rank 2 at step 'peers'").
  std::string get(const std::string& key, const std::string& waiting_for, Deadline deadline);
  int64_t server_time(Deadline deadline);  // rank 0's wall_clock_ns()
  // c10d's Store operations. add: the key holds a decimal number (absent: 0), `delta` is added, the sum returned.
  int64_t add(const std::string& key, int64_t delta, Deadline deadline);
  // Sets `desired` where the key holds `expected` (or is absent and `expected` is empty); returns what it holds after.
  std::string compare_set(const std::string& key, const std::string& expected, const std::string& desired,
                          Deadline deadline);
  bool remove(const std::string& key, Deadline deadline);  // whether it was there
  bool check(const std::vector<std::string>& keys, Deadline deadline);
  int64_t key_count(Deadline deadline);
  // Whether every key was set by `deadline`.
  bool wait(const std::vector<std::string>& keys, Deadline deadline);
  const std::string& where() const { return where_; }

 private:
  std::string request(const std::string& message, Deadline deadline, const std::string& what);
  // Throws ExchangeError unless `verdict`, the first field of `answer`, admits `rank`.
  void check_verdict(const std::string& verdict, WireReader& answer, int rank) const;

  std::string where_;
  Socket socket_;
  bool broken_ = false;  // a reply did not come: one may still, so the connection is out of step
};

}  // namespace ddp
