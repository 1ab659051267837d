#include "doctor/run/shared_dir.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "core/error.hpp"
#include "core/parse.hpp"
#include "doctor/checks/storage.hpp"

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

}  // namespace

std::string new_nonce() {
  std::random_device random;
  std::string nonce;
  for (int i = 0; i < 32; ++i) nonce += "0123456789abcdef"[random() % 16];
  return nonce;
}

bool valid_nonce(const std::string& text) {
  return text.size() == 32 && text.find_first_not_of("0123456789abcdef") == std::string::npos;
}

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
  // Everyone has looked before anyone removes a token.
  group.barrier("tokens read", deadline);
  if (taking_part) unlink(token_path(dir, nonce, group.rank()).c_str());
  return results;
}

}  // namespace ddp::doctor
