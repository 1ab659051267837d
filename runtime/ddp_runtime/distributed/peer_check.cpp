#include "ddp_runtime/distributed/peer_check.hpp"

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <algorithm>
#include <cctype>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include "ddp_runtime/common/c10d_compat.hpp"
#include "ddp_runtime/common/error_message.hpp"
#include "ddp_runtime/distributed/project_store.hpp"
#include "ddp_runtime/distributed/store_auth.hpp"

namespace ddp::runtime {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Under the job's secret key prefix (store_auth.hpp): an outsider who reaches rank 0's store cannot forge them.
const std::string kPrefix = "peer-check/";
constexpr milliseconds kAlivePoll{50};
// After rank 0's verdict, the others wait this long before they report: srun ends the step at rank 0's exit.
constexpr milliseconds kLetRankZeroEnd{2000};
// How long rank 0 waits for the others to have read its verdict before it goes (and its store with it).
constexpr milliseconds kVerdictRead{1000};
constexpr std::size_t kNamedAtMost = 16;

// What Gloo, NCCL and c10d say when a collective failed because of a peer (c10d's store: "Socket Timeout" when a
// peer never wrote the key a rendezvous waits for).
constexpr const char* kPeerFailures[] = {"timed out",     "connection closed by peer", "connection reset by peer",
                                         "broken pipe",   "communicator was aborted",  "operation timeout",
                                         "socket timeout"};

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  return text;
}

std::string seconds_text(milliseconds window) {
  const auto tenths = (window.count() + 50) / 100;
  return std::to_string(tenths / 10) + (tenths % 10 ? "." + std::to_string(tenths % 10) : "") + " s";
}

// The outcome of the check, shared with the thread that talks to the store: that thread may block in a store call
// on a stopped rank 0 for as long as the store's own timeout, and is left behind when the deadline passes.
struct Outcome {
  std::mutex mutex;
  std::condition_variable done_changed;
  bool done = false;
  std::string verdict;  // the ranks that did not answer, in words; empty when all did
  std::string failure;  // why the check itself failed (rank 0 unreachable)
};

std::string name_missing(const Launch& launch, const std::vector<RankIdentity>& ranks, c10d::Store& store) {
  std::vector<std::string> missing;
  std::size_t count = 0;
  for (int r = 1; r < launch.world_size; ++r) {
    if (store.check({kPrefix + "alive/" + std::to_string(r)})) continue;
    if (++count <= kNamedAtMost) missing.push_back(describe_rank(ranks, r));
  }
  if (count == 0) return "";
  std::string names;
  for (const auto& name : missing) names += (names.empty() ? "" : ", ") + name;
  if (count > missing.size()) names += " and " + std::to_string(count - missing.size()) + " more";
  return (count == 1 ? names + " did not answer" : std::to_string(count) + " ranks did not answer: " + names);
}

void run_check(const Launch& launch, const std::vector<RankIdentity>& ranks, milliseconds window,
               const compat::StorePtr& hosted, const std::shared_ptr<Outcome>& outcome) {
  std::string verdict;
  std::string failure;
  try {
    // Elsewhere a fresh connection, whose server proves the job's key again: after a failure, whatever listens on
    // the port now may not be rank 0's.
    const compat::StorePtr store =
        launch.rank == 0 && hosted
            ? hosted
            : under_key_prefix(launch,
                               connect_project_store(launch, rendezvous_run(launch), launch.master_addr,
                                                     static_cast<uint16_t>(launch.master_port), window, window));
    store->set(kPrefix + "alive/" + std::to_string(launch.rank), store_value("1"));
    store->add(kPrefix + "answered", 1);
    const auto deadline = Clock::now() + window;
    if (launch.rank == 0) {
      int64_t answered = 1;
      while ((answered = store->add(kPrefix + "answered", 0)) < launch.world_size && Clock::now() < deadline) {
        std::this_thread::sleep_for(kAlivePoll);
      }
      if (answered < launch.world_size) verdict = name_missing(launch, ranks, *store);
      store->set(kPrefix + "verdict", store_value("=" + verdict));
      const auto read_by = Clock::now() + kVerdictRead;
      while (store->add(kPrefix + "read", 0) < answered - 1 && Clock::now() < read_by)
        std::this_thread::sleep_for(kAlivePoll);
    } else {
      while (!store->check({kPrefix + "verdict"}) && Clock::now() < deadline + window)
        std::this_thread::sleep_for(kAlivePoll);
      if (!store->check({kPrefix + "verdict"})) throw std::runtime_error("no verdict");
      const std::vector<uint8_t> text = store->get(kPrefix + "verdict");
      store->add(kPrefix + "read", 1);
      verdict = std::string(text.begin() + 1, text.end());
      if (!verdict.empty()) std::this_thread::sleep_for(kLetRankZeroEnd);
    }
  } catch (const std::exception& e) {
    failure = error_summary(e);
  }
  std::lock_guard<std::mutex> lock(outcome->mutex);
  outcome->verdict = verdict;
  outcome->failure = failure.empty() ? "" : failure;
  outcome->done = true;
  outcome->done_changed.notify_all();
}

}  // namespace

bool is_peer_failure(const std::string& error) {
  const std::string text = lower(error);
  return std::any_of(std::begin(kPeerFailures), std::end(kPeerFailures),
                     [&](const char* pattern) { return text.find(pattern) != std::string::npos; });
}

std::string explain_peer_failure(const Launch& launch, const std::string& backend,
                                 const std::vector<RankIdentity>& ranks, const std::string& error, milliseconds window,
                                 const compat::StorePtr& hosted) {
  if (launch.world_size < 2 || backend == "mpi" || launch.master_addr.empty() || !is_peer_failure(error)) {
    return error;
  }
  auto outcome = std::make_shared<Outcome>();
  std::thread(run_check, launch, ranks, window, hosted, outcome).detach();
  std::unique_lock<std::mutex> lock(outcome->mutex);
  const milliseconds bound = 2 * window + kLetRankZeroEnd + milliseconds(2000);
  const bool finished = outcome->done_changed.wait_for(lock, bound, [&] { return outcome->done; });
  const std::string cause = " after a collective failed (" + first_line(error) + ")";
  if (!finished || !outcome->failure.empty()) {
    return describe_rank(ranks, 0) + ", which hosts the rendezvous store, did not answer within " +
           seconds_text(window) + cause + ": it is stopped, hung or gone (" +
           (finished ? outcome->failure : "no answer at all") + ")";
  }
  if (outcome->verdict.empty()) return error;
  const std::string verdict = outcome->verdict + " within " + seconds_text(window) + cause + ": stopped, hung or gone";
  return launch.rank == 0 ? verdict : "rank " + std::to_string(launch.rank) + ": rank 0 found that " + verdict;
}

}  // namespace ddp::runtime
