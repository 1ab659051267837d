#include "doctor/run/shared_dir.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "base/parse.hpp"
#include "base/random_hex.hpp"
#include "core/error.hpp"
#include "doctor/checks/storage.hpp"
#include "store/wire.hpp"

namespace ddp::doctor {
namespace {

constexpr auto kTokenRetryPause = std::chrono::milliseconds(100);

bool token_readable(const std::string& dir, const std::string& nonce, int rank) {
  std::ifstream file(token_path(dir, nonce, rank));
  std::stringstream content;
  content << file.rdbuf();
  return file && content.str() == token_content(nonce, rank);
}

std::vector<Peer> sharing_leaders(const std::vector<Peer>& peers) {
  std::vector<Peer> found;
  for (const auto& peer : leaders(peers)) {
    if (peer.storage_ok) found.push_back(peer);
  }
  return found;
}

constexpr size_t kNonceDigits = 32;
// What rank 0 says of its token's lock, broadcast to the others, who grade it.
struct TokenLock {
  enum State : int64_t { Held, NoToken, CannotOpen, Failed };
  State state = NoToken;
  std::string why;  // CannotOpen, Failed: the error

  std::string encode() const { return WireWriter().put_int(state).put(why).bytes(); }
  static TokenLock decode(const std::string& bytes) {
    WireReader reader(bytes);
    const auto state = static_cast<State>(reader.get_int(Held, Failed));
    return {state, reader.get_text()};
  }
};

// The detail of a WARN: `error` is empty where this node took a lock `holder` holds, else why it could not lock.
std::string node_local_locks(const std::string& path, const Peer& holder, const std::string& error) {
  const std::string what =
      error.empty() ? "this node took the lock " + describe(holder) + " holds on " + quote(path) +
                          ": locks in the snapshot directory are node-local (NFS mounted with local_lock=flock or "
                          "local_lock=all, Lustre with localflock)"
                    : "no lock can be taken on " + quote(path) + " (" + error + ")";
  return what +
         "; ddp-train then leaves an unfinished snapshot file of another node for an hour before it removes it. "
         "Mount the directory with local_lock=none (NFS) or flock (Lustre) for locks every node sees";
}

// Rank 0 locks its own token as ddp-train's writer locks its temporary (flock), into `fd`.
TokenLock hold_lock(const std::string& path, int& fd) {
  fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return {TokenLock::CannotOpen, "cannot open " + quote(path) + ": " + std::strerror(errno)};
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) return {TokenLock::Failed, std::strerror(errno)};
  return {TokenLock::Held, ""};
}

// Another leader tries to lock rank 0's locked token: it must be refused.
CheckResult try_rank_zeros_lock(const std::string& path, const Peer& holder) {
  const std::string threshold = "refused while " + describe(holder) + " holds it";
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    return make_result(checks::kStorageLocks, Status::Skip, "not tried", threshold,
                       "cannot open " + quote(path) + ": " + std::strerror(errno));
  }
  const bool taken = flock(fd, LOCK_EX | LOCK_NB) == 0;
  const int error = errno;
  close(fd);
  if (!taken && error == EWOULDBLOCK) return make_result(checks::kStorageLocks, Status::Ok, "refused", threshold, path);
  const std::string value = taken ? "taken" : std::string("failed: ") + std::strerror(error);
  return make_result(checks::kStorageLocks, Status::Warn, value, threshold,
                     node_local_locks(path, holder, taken ? "" : std::strerror(error)));
}

// This rank's storage.locks row, once rank 0 said whether it holds its token locked (`lock`); none for ranks that do
// not take part. Rank 0 has a row only where it could not lock; another leader tries only rank 0's token it saw.
CheckResult grade_locks(int rank, const std::vector<Peer>& sharing, const std::string& dir, const std::string& nonce,
                        const TokenLock& lock, const std::vector<CheckResult>& shared) {
  const auto me = std::find_if(sharing.begin(), sharing.end(), [&](const Peer& p) { return p.rank == rank; });
  if (me == sharing.end()) return {};
  const Peer& holder = sharing.front();
  CheckResult result;
  if (lock.state != TokenLock::Held) {
    // Where rank 0 had no token to lock, storage.shared says why.
    if (rank != 0 || lock.state == TokenLock::NoToken) return {};
    result = lock.state == TokenLock::CannotOpen
                 ? skipped(checks::kStorageLocks, lock.why)
                 : make_result(checks::kStorageLocks, Status::Warn, "failed: " + lock.why, "a lock rank 0 holds",
                               node_local_locks(token_path(dir, nonce, 0), holder, lock.why));
  } else if (rank == 0) {
    return {};
  } else if (shared.empty() || shared.back().status != Status::Ok) {
    result = skipped(checks::kStorageLocks, "rank 0's file does not appear here (storage.shared)");
  } else {
    result = try_rank_zeros_lock(token_path(dir, nonce, 0), holder);
  }
  result.rank = me->rank;
  result.host = me->host;
  return result;
}

}  // namespace

std::string new_nonce() { return random_hex(kNonceDigits, "ddp-doctor's run nonce"); }

bool valid_nonce(const std::string& text) { return is_lower_hex(text, kNonceDigits); }

std::string token_path(const std::string& dir, const std::string& nonce, int rank) {
  return dir + "/" + kDoctorFilePrefix + "shared-" + nonce + "-" + std::to_string(rank);
}

std::string token_content(const std::string& nonce, int rank) {
  return "ddp-doctor run " + nonce + " rank " + std::to_string(rank) + "\n";
}

void write_token(const std::string& dir, const std::string& nonce, int rank) {
  const std::string path = token_path(dir, nonce, rank);
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) throw Error("cannot create " + quote(path) + ": " + std::strerror(errno));
  const std::string content = token_content(nonce, rank);
  // fsync and close before the others look: close-to-open is all NFS promises.
  const bool written =
      write(fd, content.data(), content.size()) == static_cast<ssize_t>(content.size()) && fsync(fd) == 0;
  close(fd);
  if (!written) throw Error("cannot write " + quote(path) + ": " + std::strerror(errno));
}

std::vector<int> missing_tokens(const std::string& dir, const std::string& nonce, const std::vector<int>& ranks,
                                std::chrono::milliseconds patience) {
  const auto give_up = std::chrono::steady_clock::now() + patience;
  std::vector<int> missing = ranks;
  for (;;) {
    std::vector<int> still;
    for (const int rank : missing) {
      if (!token_readable(dir, nonce, rank)) still.push_back(rank);
    }
    missing = std::move(still);
    if (missing.empty() || std::chrono::steady_clock::now() >= give_up) return missing;
    std::this_thread::sleep_for(kTokenRetryPause);
  }
}

CheckResult grade_shared(const std::string& dir, const std::vector<int>& missing, const std::vector<Peer>& others) {
  const std::string threshold = "all nodes' tokens";
  const std::string value =
      std::to_string(others.size() - missing.size()) + " of " + std::to_string(others.size()) + " other node(s)";
  if (missing.empty()) return make_result(checks::kStorageShared, Status::Ok, value, threshold, dir);
  std::string unseen;
  for (const auto& peer : others) {
    if (std::find(missing.begin(), missing.end(), peer.rank) != missing.end()) {
      unseen += (unseen.empty() ? "" : ", ") + describe(peer);
    }
  }
  return make_result(checks::kStorageShared, Status::Fail, value, threshold,
                     "files written by " + unseen + " do not appear in " + quote(dir) +
                         ": it is not the same directory on every node (a node-local disk or tmpfs?); put "
                         "DDP_SNAPSHOT_DIR on storage all nodes share, or a restarted job will not find its snapshots");
}

std::vector<CheckResult> check_shared_dir(Group& group, const std::vector<Peer>& peers, const std::string& dir,
                                          Deadline deadline) {
  const std::vector<Peer> sharing = sharing_leaders(peers);
  const std::string nonce = group.broadcast("nonce", group.rank() == 0 ? new_nonce() : "", deadline);
  if (!valid_nonce(nonce)) throw ExchangeError("rank 0 sent a malformed nonce " + quote(nonce));
  const auto me = std::find_if(sharing.begin(), sharing.end(), [&](const Peer& p) { return p.rank == group.rank(); });
  const bool taking_part = me != sharing.end() && sharing.size() > 1;
  std::string write_error;
  if (taking_part) {
    try {
      write_token(dir, nonce, group.rank());
    } catch (const std::exception& e) {
      write_error = e.what();
    }
  }
  group.barrier("tokens written", deadline);
  std::vector<CheckResult> results;
  if (taking_part) {
    std::vector<Peer> others;
    std::vector<int> other_ranks;
    for (const auto& peer : sharing) {
      if (peer.rank == group.rank()) continue;
      others.push_back(peer);
      other_ranks.push_back(peer.rank);
    }
    results.push_back(
        write_error.empty()
            ? grade_shared(dir, missing_tokens(dir, nonce, other_ranks, kTokenPatience), others)
            : make_result(checks::kStorageShared, Status::Fail, "no token", "all nodes' tokens", write_error));
    results.back().rank = me->rank;
    results.back().host = me->host;
  }
  if (group.rank() == 0 && sharing.size() < 2) {
    results.push_back(skipped(checks::kStorageShared, "fewer than two nodes with a usable snapshot directory"));
  }
  // Rank 0 holds its token locked until every other node has tried to lock it too.
  const bool rank_zero_part = !sharing.empty() && sharing.front().rank == 0 && sharing.size() > 1;
  int held = -1;
  TokenLock holding;
  if (group.rank() == 0 && rank_zero_part && write_error.empty()) holding = hold_lock(token_path(dir, nonce, 0), held);
  const TokenLock lock = TokenLock::decode(group.broadcast("token locked", holding.encode(), deadline));
  if (rank_zero_part) {
    const CheckResult tried = grade_locks(group.rank(), sharing, dir, nonce, lock, results);
    if (!tried.check.empty()) results.push_back(tried);
  } else if (group.rank() == 0) {
    results.push_back(
        skipped(checks::kStorageLocks, "rank 0's node and another must share a usable snapshot directory"));
  }
  // Everyone has looked and tried before a token is removed or rank 0's lock is let go.
  group.barrier("tokens read", deadline);
  if (held >= 0) close(held);
  if (taking_part) unlink(token_path(dir, nonce, group.rank()).c_str());
  return results;
}

}  // namespace ddp::doctor
