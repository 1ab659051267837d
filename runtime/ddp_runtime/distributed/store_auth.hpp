#pragma once
// What the job's key (DDP_JOB_KEY, which only the job's environment holds: ports.hpp) gives ddp-train beside the
// stores' own proof (project_store.hpp: a client and its server prove the key to each other before any key is read
// or written):
// - the key prefix, HMAC(key, "ddp-train keys <run> <restart>"): every key of ddp-train, Gloo (the ranks'
//   addresses, which connectFullMesh waits for) and NCCL (its unique id) lives under it, so that a key's name says
//   nothing, also where it reaches an error message (it is redacted there too: core/redact.hpp);
// - sealed records and the state's MAC, for in-place recovery (below).
// Without DDP_JOB_KEY (a launch outside srun --ddp) all of them come from a fixed key: they still keep apart another
// job or program that holds the port by accident, but anyone can compute them.
//
// Every MAC is the project's one HMAC, HMAC-SHA-256 (base/hmac.hpp), as the store's proofs are.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/launch.hpp"
#include "ddp_runtime/common/c10d_compat.hpp"

namespace ddp::runtime {

// A text as the bytes of a store value.
std::vector<uint8_t> store_value(const std::string& text);
std::string store_text(const std::vector<uint8_t>& value);  // store_value's inverse

// HMAC-SHA-256 of `message` under the job's key (DDP_JOB_KEY; without one, a fixed key anyone could compute), in hex.
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

// The prefix of the job's keys, bound to the run and the restart count, and a store with every key under it.
std::string store_key_prefix(const Launch& launch);
compat::StorePtr under_key_prefix(const Launch& launch, compat::StorePtr store);

}  // namespace ddp::runtime
