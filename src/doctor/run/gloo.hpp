#pragma once
// Gloo between doctor ranks, connected by Gloo's own rendezvous (gloo::rendezvous::Context::connectFullMesh) over
// the doctor's store: each rank publishes its pairs' addresses under keys of the store and connects to the ones
// meant for it. The link test and the Gloo all-reduce run on such contexts, as PyTorch's gloo backend does.
#include <chrono>
#include <memory>
#include <string>

#include "doctor/run/allreduce.hpp"
#include "store/store.hpp"

namespace gloo {
class Context;
namespace transport {
class Device;
}  // namespace transport
}  // namespace gloo

namespace ddp::doctor {

// Gloo's TCP device on `address`, this rank's address on the chosen interface. Throws std::runtime_error.
std::shared_ptr<gloo::transport::Device> gloo_device(const std::string& address);

// This process as `rank` of `size` in a context whose ranks meet under the keys `prefix`/... of `store`; every
// Gloo wait, the connection's included, ends after `timeout`. Throws ExchangeError (the store) or what Gloo throws.
std::shared_ptr<gloo::Context> connect_gloo(StoreClient& store, const std::string& prefix, int rank, int size,
                                            const std::shared_ptr<gloo::transport::Device>& device,
                                            std::chrono::milliseconds timeout);

std::unique_ptr<AllreduceBackend> make_gloo_backend();

}  // namespace ddp::doctor
