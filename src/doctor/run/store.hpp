#pragma once
// The key-value store the ranks meet through. Rank 0 serves it on MASTER_PORT, the port the training's own store
// will use, so reaching it is also the master-port check; every rank, rank 0 included, is a client. The doctor's
// exchanges (group.hpp) and Gloo's rendezvous (gloo.hpp) are keys in it.
//
// Nothing a peer sends is trusted: each connection has a thread of its own, so a stranger that connects and stays
// silent delays nobody and is dropped after kGreetingWait; a greeting must name this run, its size and a free
// rank; frames, the store's size and the number of connections are bounded.
//
// Anyone who reads squeue knows the run id and size, and anyone on the network can reach the port. So the greeting
// is a challenge and response under the job's key (DDP_JOB_KEY, which only the job's environment holds): each side
// sends a random nonce, and each proves it knows the key with an HMAC-SHA-256 over both nonces and the run
// (core/hmac.hpp).
// A client that cannot prove it takes no rank slot and can set no key; one that is slow to prove it holds only one of
// kMaxPending places, the oldest of which a new connection takes: strangers never fill the server. The rank, too,
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

#include "core/socket.hpp"
#include "doctor/run/wire.hpp"

namespace ddp::doctor {

inline constexpr size_t kMaxFrame = 16u << 20;        // one request or reply of a rank
inline constexpr size_t kMaxStoreBytes = 256u << 20;  // all values together
inline constexpr auto kGreetingWait = std::chrono::seconds(2);

int64_t wall_clock_ns();  // CLOCK_REALTIME

inline constexpr size_t kMaxPending = 64;  // connections not yet admitted, at most

// What a client says first: this run's id (TORCHELASTIC_RUN_ID), its size and the client's rank; what it proves its
// greeting with: the job's key (empty: none).
struct Greeting {
  std::string run_id;
  int world_size = 1;
  int rank = 0;
  std::string job_key;
};

// The proof of a greeting's side ("server" or "client") over its fields: HMAC-SHA-256 under `job_key`, in hex.
std::string greeting_proof(const std::string& job_key, const std::string& side, const std::vector<std::string>& fields);

class StoreServer {
 public:
  // Listens on `port` of every address (0: one the kernel picks); throws NetError. Clients must prove `job_key`
  // (empty: none).
  StoreServer(uint16_t port, std::string run_id, int world_size, std::string job_key = "");
  ~StoreServer();  // ends every connection
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  uint16_t port() const { return port_; }
  // The ranks whose greeting was accepted, ascending, once all have come or at `deadline`.
  std::vector<int> wait_for_ranks(Deadline deadline);
  // Until every rank but 0 has closed its connection (it read all it wanted), or `deadline`.
  void wait_for_ranks_to_leave(Deadline deadline);

 private:
  void accept_connections();
  void serve(Socket socket);
  int admit(const Socket& socket);  // the greeted rank, or -1 after a refusal
  void answer(const Socket& socket, WireReader& request);

  Socket listener_;
  uint16_t port_;
  std::string run_id_;
  int world_size_;
  std::string job_key_;
  std::mutex mutex_;  // guards everything below
  std::condition_variable changed_;
  std::map<std::string, std::string> values_;
  size_t stored_bytes_ = 0;
  std::set<int> joined_;
  int connected_ranks_ = 0;          // other than 0
  std::set<int> connections_;        // their descriptors, shut down when the server stops
  std::map<int, uint64_t> pending_;  // descriptors not yet admitted, with their order of arrival
  uint64_t arrivals_ = 0;
  size_t threads_ = 0;  // the acceptor's and the connections'
  bool stopping_ = false;
};

class StoreClient {
 public:
  // Connects to `host`:`port`, retrying for `timeout` while nothing listens there yet, and greets. Throws
  // ExchangeError naming the address, how long it tried and why, rank 0's reason to refuse, or that the server could
  // not prove the job's key.
  StoreClient(const std::string& host, uint16_t port, const Greeting& greeting, std::chrono::milliseconds timeout);

  void set(const std::string& key, const std::string& value, Deadline deadline);
  // Waits for `key` to be set; `waiting_for` starts the error's message ("waiting for rank 2 at step 'peers'").
  std::string get(const std::string& key, const std::string& waiting_for, Deadline deadline);
  int64_t server_time(Deadline deadline);  // rank 0's wall_clock_ns()

 private:
  std::string request(const std::string& message, Deadline deadline, const std::string& what);
  // Throws ExchangeError unless `verdict`, the first field of `answer`, admits `rank`.
  void check_verdict(const std::string& verdict, WireReader& answer, int rank) const;

  std::string where_;
  Socket socket_;
  bool broken_ = false;  // a reply did not come: one may still, so the connection is out of step
};

}  // namespace ddp::doctor
