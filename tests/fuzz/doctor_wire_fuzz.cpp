// The messages one ddp-doctor rank reads from another (src/doctor/run/wire.hpp): any bytes must end in a decoded value
// or an ExchangeError, never a crash, an unbounded allocation or a hang.
#include <cstddef>
#include <cstdint>
#include <string>

#include "doctor/run/wire.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  try {
    ddp::doctor::decode_results(bytes);
  } catch (const ddp::ExchangeError&) {
  }
  try {
    ddp::doctor::decode_members(bytes, 1 << 20, 1);
  } catch (const ddp::ExchangeError&) {
  }
  try {
    ddp::doctor::decode_peer(bytes);
  } catch (const ddp::ExchangeError&) {
  }
  return 0;
}
