#include "doctor/gloo_allreduce.hpp"

#include <gloo/allreduce.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/transport/tcp/device.h>

#include <chrono>

namespace ddp::doctor {
namespace {

// A Gloo context whose pairs find each other through the doctor's own exchange instead of a rendezvous store:
// each rank publishes the address of its pair for every other rank, and connects to the one meant for it.
class ExchangeContext : public gloo::Context {
 public:
  ExchangeContext(int rank, int size) : gloo::Context(rank, size) {}

  // Every rank publishes one message, with its error when its own setup failed, so that a failure on one rank
  // stops all of them at the same step.
  void connect(Transport& exchange, const std::string& address) {
    std::shared_ptr<gloo::transport::Device> device;
    std::shared_ptr<gloo::transport::Context> pairs;
    WireWriter mine;
    try {
      if (address.empty()) throw std::runtime_error("no usable address on this rank's interface");
      gloo::transport::tcp::attr attr;
      attr.hostname = address;
      device = gloo::transport::tcp::CreateDevice(attr);
      pairs = device->createContext(rank, size);
      pairs->setTimeout(getTimeout());
      mine.put("");
      for (int peer = 0; peer < size; ++peer) {
        const std::vector<char> bytes = peer == rank ? std::vector<char>{} : pairs->createPair(peer)->address().bytes();
        mine.put(std::string(bytes.begin(), bytes.end()));
      }
    } catch (const std::exception& e) {
      mine = WireWriter();
      mine.put(e.what());
    }
    const auto everyone = all_gather(exchange, mine.bytes(), Deadline::after(getTimeout()));
    if (const std::string own = WireReader(everyone[static_cast<size_t>(rank)]).get(); !own.empty()) {
      throw std::runtime_error(own);
    }
    for (size_t peer = 0; peer < everyone.size(); ++peer) {
      if (!WireReader(everyone[peer]).get().empty()) {
        throw PeerFailure("Gloo setup failed on rank " + std::to_string(exchange.members()[peer]));
      }
    }
    for (int peer = 0; peer < size; ++peer) {
      if (peer == rank) continue;
      WireReader theirs(everyone[static_cast<size_t>(peer)]);
      std::string for_me = theirs.get();  // their (empty) error
      for (int slot = 0; slot <= rank; ++slot) for_me = theirs.get();
      pairs->getPair(peer)->connect(std::vector<char>(for_me.begin(), for_me.end()));
    }
    device_ = device;
    transportContext_ = std::move(pairs);
  }
};

AllreduceTiming time_size(const std::shared_ptr<gloo::Context>& context, const AllreduceSize& size,
                          float fill, uint32_t& tag) {
  const size_t count = size.bytes / sizeof(float);
  std::vector<float> input(count, fill);
  std::vector<float> output(count, 0.0f);
  const auto reduce_once = [&] {
    gloo::AllreduceOptions options(context);
    options.setInput(input.data(), count);
    options.setOutput(output.data(), count);
    options.setReduceFunction(
        static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
    options.setTag(tag++);
    gloo::allreduce(options);
  };
  reduce_once();  // warm-up: first-touch of the buffers and the pairs' first messages
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < size.iterations; ++i) reduce_once();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const float expected = expected_sum(context->size);
  bool correct = true;
  for (const float value : output) correct = correct && value == expected;
  return {size.bytes, seconds / size.iterations, correct};
}

class GlooBackend : public AllreduceBackend {
 public:
  std::string name() const override { return "gloo"; }
  std::string unavailable() override { return ""; }

  std::vector<AllreduceTiming> run(Transport& transport, const CollectiveSetup& setup,
                                   const std::vector<AllreduceSize>& sizes) override {
    auto context = std::make_shared<ExchangeContext>(setup.member_index,
                                                     static_cast<int>(transport.members().size()));
    context->setTimeout(setup.timeout);
    context->connect(transport, setup.data_address);
    std::vector<AllreduceTiming> timings;
    uint32_t tag = 0;
    for (const auto& size : sizes) timings.push_back(time_size(context, size, fill_value(setup.member_index), tag));
    return timings;
  }
};

}  // namespace

std::unique_ptr<AllreduceBackend> make_gloo_backend() { return std::make_unique<GlooBackend>(); }

}  // namespace ddp::doctor
