#include "ddp_runtime/distributed/project_store.hpp"

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <mutex>
#include <utility>
#include <vector>

#include "base/socket.hpp"
#include "ddp_runtime/distributed/store_auth.hpp"
#include "store/store.hpp"

namespace ddp::runtime {
namespace {

class ProjectStore : public c10d::Store {
 public:
  struct Target {
    std::string host;
    uint16_t port = 0;
    Greeting greeting;
  };

  ProjectStore(std::shared_ptr<StoreServer> hosted, Target target, std::chrono::milliseconds connect_wait,
               std::chrono::milliseconds timeout)
      : c10d::Store(timeout),
        hosted_(std::move(hosted)),
        target_(std::move(target)),
        client_(target_.host, target_.port, target_.greeting, connect_wait) {}

  // A second connection to the same server (LibTorch 2.7 and later call it; a virtual of theirs, a plain member of
  // this class before).
  c10::intrusive_ptr<c10d::Store> clone() {
    return c10::make_intrusive<ProjectStore>(hosted_, target_, timeout_, timeout_);
  }

  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    const std::lock_guard<std::mutex> lock(mutex_);
    client_.set(key, store_text(value), deadline());
  }

  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                  const std::vector<uint8_t>& desired) override {
    const std::lock_guard<std::mutex> lock(mutex_);
    return store_value(client_.compare_set(key, store_text(expected), store_text(desired), deadline()));
  }

  std::vector<uint8_t> get(const std::string& key) override {
    const std::lock_guard<std::mutex> lock(mutex_);
    return store_value(client_.get(key, "waiting for a key of the store at " + client_.where(), deadline()));
  }

  int64_t add(const std::string& key, int64_t value) override {
    const std::lock_guard<std::mutex> lock(mutex_);
    return client_.add(key, value, deadline());
  }

  bool deleteKey(const std::string& key) override {
    const std::lock_guard<std::mutex> lock(mutex_);
    return client_.remove(key, deadline());
  }

  bool check(const std::vector<std::string>& keys) override {
    const std::lock_guard<std::mutex> lock(mutex_);
    return client_.check(keys, deadline());
  }

  int64_t getNumKeys() override {
    const std::lock_guard<std::mutex> lock(mutex_);
    return client_.key_count(deadline());
  }

  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }

  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (!client_.wait(keys, Deadline::after(timeout))) {
      throw std::runtime_error("timed out after " + std::to_string(timeout.count()) + " ms waiting for " +
                               std::to_string(keys.size()) + " key(s) of the store at " + client_.where());
    }
  }

 private:
  Deadline deadline() const { return Deadline::after(timeout_); }

  std::shared_ptr<StoreServer> hosted_;  // this process's server, where it hosts the store
  Target target_;
  std::mutex mutex_;  // one request at a time on the connection
  StoreClient client_;
};

Greeting greeting_of(const Launch& launch, const std::string& run) {
  return Greeting{run, 0, kAnyRank, launch.job_key};
}

}  // namespace

std::string rendezvous_run(const Launch& launch) {
  return "ddp-train " + launch.run_id + " attempt " + std::to_string(launch.restart_count);
}

std::string standby_run(const std::string& run_id) { return "ddp-train standby " + run_id; }

compat::StorePtr host_project_store(const Launch& launch, const std::string& run, const std::string& address,
                                    uint16_t port, std::chrono::milliseconds timeout, uint16_t& bound_port,
                                    size_t max_clients) {
  auto server = std::make_shared<StoreServer>(address, port, Admission{run, 0, launch.job_key, false, max_clients});
  bound_port = server->port();
  const std::string self = address.empty() ? "127.0.0.1" : address;
  return c10::make_intrusive<ProjectStore>(server, ProjectStore::Target{self, bound_port, greeting_of(launch, run)},
                                           timeout, timeout);
}

compat::StorePtr connect_project_store(const Launch& launch, const std::string& run, const std::string& host,
                                       uint16_t port, std::chrono::milliseconds connect_wait,
                                       std::chrono::milliseconds timeout) {
  return c10::make_intrusive<ProjectStore>(nullptr, ProjectStore::Target{host, port, greeting_of(launch, run)},
                                           connect_wait, timeout);
}

}  // namespace ddp::runtime
