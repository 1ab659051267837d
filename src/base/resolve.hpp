#pragma once
// Name resolution of the rendezvous host, checked on every node before any task starts.
#include <string>

namespace ddp {

// The first address `host` resolves to ("10.0.0.5", "fe80::1"); throws ddp::Error naming the host and
// what to fix when it does not resolve.
std::string resolve_host(const std::string& host);

}  // namespace ddp
