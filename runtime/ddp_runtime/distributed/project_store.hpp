#pragma once
// ddp-train's stores on the project's store (store/store.hpp) instead of c10d's TCPStore, which has no
// authentication and no limits: rank 0's rendezvous store, each rank's standby store for in-place recovery, and the
// peer check's connection. A client proves the job's key (DDP_JOB_KEY) to the server and the server to it, with fresh
// nonces both ways, before a single key is read or written; a program that took the port, or anyone who reaches it
// without the key, gets nothing and can set nothing.
//
// ProjectStore is a c10d::Store over one client connection (Gloo and NCCL take any Store): every call is a request on
// that connection, one at a time; get() and wait() wait up to the store's timeout and then throw, with "timed out" in
// the message as c10d's do (peer_check.hpp reads it as a peer's failure).
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "core/launch.hpp"
#include "ddp_runtime/common/c10d_compat.hpp"

namespace ddp::runtime {

// Hosts a server on `address`:`port` (empty address: every address; port 0: one the kernel picks) admitting clients
// of `run` that prove the job's key, and returns this process's own client of it, which keeps the server alive.
// `bound_port` is set to the port bound. `max_clients`: connections at once (every rank, and again each rank's peer
// check). Throws ddp::NetError where the port cannot be bound.
compat::StorePtr host_project_store(const Launch& launch, const std::string& run, const std::string& address,
                                    uint16_t port, std::chrono::milliseconds timeout, uint16_t& bound_port,
                                    size_t max_clients);

// A client of the server at host:port for `run`, connecting for up to `connect_wait` while nothing listens there
// yet; the store's calls wait up to `timeout`. Throws ddp::ExchangeError naming the address and why: nothing
// listens, the server refused, or it could not prove the job's key (another program holds the port).
compat::StorePtr connect_project_store(const Launch& launch, const std::string& run, const std::string& host,
                                       uint16_t port, std::chrono::milliseconds connect_wait,
                                       std::chrono::milliseconds timeout);

// The run a store serves: rank 0's of an attempt, or a member's standby store of a run (kept across attempts'
// generations and replacements' steps).
std::string rendezvous_run(const Launch& launch);
std::string standby_run(const std::string& run_id);

}  // namespace ddp::runtime
