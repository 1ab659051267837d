#pragma once
// Is the snapshot directory the same directory on every node? Each node leader writes a token file named by a
// run-wide nonce and its rank; every leader must then read every other leader's token. A node-local disk or
// tmpfs at the same path shows up as tokens that are missing.
#include <chrono>
#include <string>
#include <vector>

#include "doctor/checks/check.hpp"
#include "doctor/run/group.hpp"

namespace ddp::doctor {

// The run-wide nonce: 32 lower-case hex digits. valid_nonce() is checked before a nonce from rank 0 becomes part
// of a file name.
std::string new_nonce();
bool valid_nonce(const std::string& text);

std::string token_path(const std::string& dir, const std::string& nonce, int rank);
// The token's content names the run and the writer, so that a stale file from another run cannot pass.
std::string token_content(const std::string& nonce, int rank);
// Throws ddp::Error when the token cannot be written.
void write_token(const std::string& dir, const std::string& nonce, int rank);
// The ranks among `ranks` whose token is not (yet) readable in `dir`, waiting up to `patience` for network file
// systems whose directory caches lag behind a file created on another node.
std::vector<int> missing_tokens(const std::string& dir, const std::string& nonce, const std::vector<int>& ranks,
                                std::chrono::milliseconds patience);

// storage.shared for this rank: FAIL naming the nodes whose tokens it cannot see.
CheckResult grade_shared(const std::string& dir, const std::vector<int>& missing, const std::vector<Peer>& others);

// Collective over all members: leaders whose snapshot directory passed storage.dir take part. Returns this
// rank's storage.shared result (none for ranks that do not take part; rank 0 adds a SKIP for the whole run
// when fewer than two nodes can take part). Every wait ends by `deadline`, kTokenPatience before it included.
inline constexpr auto kTokenPatience = std::chrono::seconds(3);
std::vector<CheckResult> check_shared_dir(Group& group, const std::vector<Peer>& peers, const std::string& dir,
                                          Deadline deadline);

}  // namespace ddp::doctor
