#include "ddp_runtime/distributed/store_auth.hpp"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/hmac.hpp"
#include "ddp_runtime/training/error_message.hpp"

namespace ddp::runtime {

std::vector<uint8_t> store_value(const std::string& text) { return std::vector<uint8_t>(text.begin(), text.end()); }

namespace {

constexpr char kNoKey[] = "no key";

std::string job_key(const Launch& launch) { return launch.job_key.empty() ? std::string(kNoKey) : launch.job_key; }

compat::StorePtr under_prefix(const Launch& launch, compat::StorePtr store) {
  return c10::make_intrusive<c10d::PrefixStore>(store_key_prefix(launch), std::move(store));
}

}  // namespace

std::string job_hmac(const Launch& launch, const std::string& message) {
  return hmac_sha256_hex(job_key(launch), message);
}

namespace {

std::string record_context(const Launch& launch, const std::string& run_id, const std::string& name) {
  return "ddp-train record " + run_id + " " + std::to_string(launch.restart_count) + " " + name + "\n";
}

}  // namespace

std::string seal_record(const Launch& launch, const std::string& run_id, const std::string& name,
                        const std::string& text) {
  return job_hmac(launch, record_context(launch, run_id, name) + text) + "\n" + text;
}

std::optional<std::string> open_record(const Launch& launch, const std::string& run_id, const std::string& name,
                                       const std::string& sealed) {
  const std::size_t newline = sealed.find('\n');
  if (newline == std::string::npos) return std::nullopt;
  std::string text = sealed.substr(newline + 1);
  const std::string expected = job_hmac(launch, record_context(launch, run_id, name) + text);
  if (!same_mac(sealed.substr(0, newline), expected)) return std::nullopt;
  return text;
}

std::string state_mac(const Launch& launch, const std::string& run_id, int64_t generation, const char* bytes,
                      std::size_t size) {
  // In parts: the state may be gigabytes, and is not copied for its MAC.
  return HmacSha256(job_key(launch))
      .update("ddp-train state " + run_id + " " + std::to_string(launch.restart_count) + " g" +
              std::to_string(generation) + "\n")
      .update(bytes, size)
      .hex();
}

std::string store_proof(const Launch& launch) {
  return hmac_sha256_hex(job_key(launch), "ddp-train store " + launch.run_id + " " +
                                              std::to_string(launch.restart_count) + " " + launch.master_addr + ":" +
                                              std::to_string(launch.master_port));
}

std::string store_key_prefix(const Launch& launch) {
  return hmac_sha256_hex(job_key(launch),
                         "ddp-train keys " + launch.run_id + " " + std::to_string(launch.restart_count));
}

compat::StorePtr publish_proof(const compat::StorePtr& store, const Launch& launch) {
  const std::string proof = store_proof(launch);
  store->set(kStoreProofKey, store_value(proof));
  return under_prefix(launch, store);
}

ProvenStore connect_proven(const std::string& host, uint16_t port, const std::string& proof_key,
                           const std::string& proof, std::chrono::milliseconds wait, std::chrono::milliseconds slack) {
  struct Attempt {
    std::mutex mutex;
    std::condition_variable done_cv;
    bool done = false;
    ProvenStore result;
  };
  c10d::TCPStoreOptions options;
  options.port = port;
  options.isServer = false;
  options.waitWorkers = false;
  options.timeout = wait;
  const auto attempt = std::make_shared<Attempt>();
  std::thread([attempt, host, options, proof_key, proof, wait] {
    ProvenStore result;
    try {
      result.store = compat::make_tcp_store(host, options);
      result.store->setTimeout(wait);
      const std::vector<uint8_t> value = result.store->get(proof_key);
      if (std::string(value.begin(), value.end()) != proof) {
        result = {{}, "it answered with another proof: it is another job's or another run's store"};
      }
    } catch (const std::exception& e) {
      result = {{}, error_summary(e)};
    }
    const std::lock_guard<std::mutex> lock(attempt->mutex);
    attempt->result = std::move(result);
    attempt->done = true;
    attempt->done_cv.notify_all();
  }).detach();
  std::unique_lock<std::mutex> lock(attempt->mutex);
  // The client's own timeouts come first; this bound is for the wait that has none.
  if (!attempt->done_cv.wait_for(lock, wait + slack, [&] { return attempt->done; })) {
    return {{}, "no answer within " + std::to_string((wait + slack).count()) + " ms"};
  }
  return attempt->result;
}

ProvenStore connect_verified(const Launch& launch, std::chrono::milliseconds wait, std::chrono::milliseconds timeout) {
  ProvenStore proven = connect_proven(launch.master_addr, static_cast<uint16_t>(launch.master_port), kStoreProofKey,
                                      store_proof(launch), wait, std::chrono::seconds(2));
  if (!proven.store) return proven;
  proven.store->setTimeout(timeout);
  proven.store = under_prefix(launch, std::move(proven.store));
  return proven;
}

}  // namespace ddp::runtime
