#pragma once
// Random names and secrets as lowercase hex, from the kernel's random source (getrandom): the job's key and instance,
// ddp-doctor's nonces, the store's challenge nonces, the runtime's temporary file names.
#include <cstddef>
#include <string>
#include <string_view>

namespace ddp {

// `digits` lowercase hex digits; throws ddp::Error naming `what` where the kernel gives no random bytes.
std::string random_hex(std::size_t digits, const char* what);

// Whether `text` is exactly `digits` lowercase hex digits.
bool is_lower_hex(std::string_view text, std::size_t digits);

}  // namespace ddp
