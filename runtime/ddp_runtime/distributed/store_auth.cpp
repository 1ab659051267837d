#include "ddp_runtime/distributed/store_auth.hpp"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <string>
#include <utility>
#include <vector>

#include "base/hmac.hpp"

namespace ddp::runtime {

std::vector<uint8_t> store_value(const std::string& text) { return std::vector<uint8_t>(text.begin(), text.end()); }

std::string store_text(const std::vector<uint8_t>& value) { return std::string(value.begin(), value.end()); }

namespace {

constexpr char kNoKey[] = "no key";

std::string job_key(const Launch& launch) { return launch.job_key.empty() ? std::string(kNoKey) : launch.job_key; }

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

std::string store_key_prefix(const Launch& launch) {
  return hmac_sha256_hex(job_key(launch),
                         "ddp-train keys " + launch.run_id + " " + std::to_string(launch.restart_count));
}

compat::StorePtr under_key_prefix(const Launch& launch, compat::StorePtr store) {
  return c10::make_intrusive<c10d::PrefixStore>(store_key_prefix(launch), std::move(store));
}

}  // namespace ddp::runtime
