#pragma once
// The project's one HMAC: HMAC-SHA-256 (RFC 2104, FIPS 180-4) from nettle, for everything proven with the job's key
// (DDP_JOB_KEY): the greetings of ddp-doctor's store, ddp-train's store proofs and key prefixes, the records of
// in-place recovery and the MAC of the state a heal sends.
//
// nettle is loaded at run time (libnettle.so.8, soname 8 since nettle 3.6) rather than linked: every system the
// project runs on has it (GnuTLS needs it: Debian, Ubuntu, RHEL, Amazon Linux), while its headers are missing where
// users build ddp-train against a PyTorch wheel. Its HMAC-SHA-256 entry points have kept their names and arguments
// through soname 8; the context is opaque to this code (a buffer larger than any version's).
#include <cstddef>
#include <string>

namespace ddp {

inline constexpr std::size_t kHmacHexDigits = 64;

class HmacSha256 {
 public:
  // Throws ddp::Error naming libnettle.so.8 and the package to install where nettle cannot be loaded.
  explicit HmacSha256(const std::string& key);
  HmacSha256& update(const void* data, std::size_t size);
  HmacSha256& update(const std::string& text) { return update(text.data(), text.size()); }
  // The MAC of everything given so far, as kHmacHexDigits lower-case hex digits; the object starts again with the
  // same key.
  std::string hex();

 private:
  alignas(64) unsigned char context_[2048];
};

std::string hmac_sha256_hex(const std::string& key, const std::string& message);

// Whether two MACs (or proofs) are equal, in a time that does not depend on where they differ.
bool same_mac(const std::string& a, const std::string& b);

}  // namespace ddp
