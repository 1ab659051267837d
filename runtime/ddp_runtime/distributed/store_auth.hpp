#pragma once
// Who may use rank 0's rendezvous store. PyTorch's c10d TCPStore has no authentication: whoever binds MASTER_PORT
// first serves the ranks, and anyone who reaches the port can connect to rank 0's store and read or write every
// key whose name he knows (the store has no command that lists keys). DDP_JOB_KEY, which only the job's
// environment holds (ports.hpp), closes both doors with two values derived from it by HMAC:
// - the proof, HMAC(key, "ddp-train store <run> <restart> <address>:<port>"): rank 0 writes it under the public name
//   kProofKey, and every other rank reads and checks it before it sends the store anything else, also when it
//   connects again after a failure (peer_check.hpp). A program that took the port cannot show it, and it learns no
//   key name of the job;
// - the key prefix, HMAC(key, "ddp-train keys <run> <restart>"): every key of ddp-train, Gloo (the ranks'
//   addresses, which connectFullMesh waits for) and NCCL (its unique id) lives under it, so an outsider who joins the
//   real store can neither read them, nor set them before the ranks do, nor forge the peer check's answers.
// Without DDP_JOB_KEY (a launch outside srun --ddp) both come from a fixed key: they still keep apart the store of
// another job or program that holds the port by accident, but anyone can compute them.
//
// Every MAC is the project's one HMAC, HMAC-SHA-256 (core/hmac.hpp), as ddp-doctor's greeting is.
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/launch.hpp"
#include "ddp_runtime/c10d_compat.hpp"

namespace ddp::runtime {

constexpr char kStoreProofKey[] = "ddp-train/store-proof";

// A text as the bytes of a store value.
std::vector<uint8_t> store_value(const std::string& text);

// HMAC-SHA-256 of `message` under the job's key (DDP_JOB_KEY; without one, the fixed key above), in hex.
std::string job_hmac(const Launch& launch, const std::string& message);

// Records of in-place recovery (the leader, each member's report, a generation's member list, a replacement's
// request and its admission: recovery.hpp) as they lie in a store: "<MAC>\n<text>", the MAC an HMAC under the job's
// key of the run, the attempt (launch.restart_count), the record's name (which holds its generation) and its text.
// A store that is not the leader's (a program that took a freed port and replays a proof it read) cannot make one,
// and one record cannot stand for another: of another run, attempt, generation or name.
std::string seal_record(const Launch& launch, const std::string& run_id, const std::string& name,
                        const std::string& text);
// The text of a sealed record, or std::nullopt when its MAC does not verify for `name` (forged, replayed from another
// generation or attempt, or not sealed at all).
std::optional<std::string> open_record(const Launch& launch, const std::string& run_id, const std::string& name,
                                       const std::string& sealed);
// The MAC of the state rank 0 sends a member that is behind or a replacement at `generation` (a snapshot's bytes),
// checked by the member before it reads a byte of it: Gloo's connections are not authenticated, so a program that
// took one over could otherwise heal the group with a model of its choosing.
std::string state_mac(const Launch& launch, const std::string& run_id, int64_t generation, const char* bytes,
                      std::size_t size);

// The proof of rank 0's store at launch.master_addr:launch.master_port (the port it bound), and the prefix of the
// job's keys: both bound to the run and the restart count.
std::string store_proof(const Launch& launch);
std::string store_key_prefix(const Launch& launch);

// Rank 0: writes the proof into the store it hosts (launch.master_port: the port it bound); returns the store under
// the key prefix.
compat::StorePtr publish_proof(const compat::StorePtr& store, const Launch& launch);

// A store that proved itself, or why none did.
struct ProvenStore {
  compat::StorePtr store;  // null when it did not prove itself
  std::string failure;     // why, in words: "no answer within 5000 ms", the client's error, or a wrong proof
};

// Connects to the store at host:port as a client and reads `proof_key` within `wait` (a listener that never answers
// does not hold this rank longer: the client runs on a thread of its own, left behind at the deadline, since the
// TCPStore client of LibTorch 2.x may wait without a deadline for its first answer). The store is returned when the
// value is `proof`.
// `slack`: how much longer than `wait` a client that got no answer at all is waited for.
ProvenStore connect_proven(const std::string& host, uint16_t port, const std::string& proof_key,
                           const std::string& proof, std::chrono::milliseconds wait, std::chrono::milliseconds slack);

// Connects to rank 0's store as a client and reads its proof within `wait` (see connect_proven). The store comes
// under the key prefix with `timeout` for later calls.
ProvenStore connect_verified(const Launch& launch, std::chrono::milliseconds wait, std::chrono::milliseconds timeout);

}  // namespace ddp::runtime
