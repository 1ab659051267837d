#include "doctor/run/gloo.hpp"

#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <memory>

namespace ddp::doctor {
namespace {

// Gloo's rendezvous keys under `prefix` in the doctor's store; waits end at the doctor's deadline.
class PrefixedStore : public gloo::rendezvous::Store {
 public:
  PrefixedStore(StoreClient& store, std::string prefix, Deadline deadline)
      : store_(store), prefix_(std::move(prefix)), deadline_(deadline) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    store_.set(prefix_ + key, std::string(data.begin(), data.end()), deadline_);
  }
  std::vector<char> get(const std::string& key) override {
    const std::string value = store_.get(prefix_ + key, "waiting for Gloo's " + prefix_ + key, deadline_);
    return {value.begin(), value.end()};
  }
  void wait(const std::vector<std::string>& keys) override {
    for (const auto& key : keys) get(key);
  }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds&) override { wait(keys); }

 private:
  StoreClient& store_;
  std::string prefix_;
  Deadline deadline_;
};

// Gloo's Context takes its rendezvous store by reference up to 2024 and as a shared_ptr since (Debian 14's 2025-09
// Gloo): whichever this Gloo's connectFullMesh accepts.
template <class Context>
auto connect_full_mesh(Context& context, const std::shared_ptr<gloo::rendezvous::Store>& store,
                       std::shared_ptr<gloo::transport::Device>& device, int)
    -> decltype(context.connectFullMesh(store, device)) {
  return context.connectFullMesh(store, device);
}
template <class Context>
auto connect_full_mesh(Context& context, const std::shared_ptr<gloo::rendezvous::Store>& store,
                       std::shared_ptr<gloo::transport::Device>& device, long)
    -> decltype(context.connectFullMesh(*store, device)) {
  return context.connectFullMesh(*store, device);
}

AllreduceTiming time_size(const std::shared_ptr<gloo::Context>& context, const AllreduceSize& size, float fill,
                          uint32_t& tag) {
  const size_t count = size.bytes / sizeof(float);
  std::vector<float> input(count, fill);
  std::vector<float> output(count, 0.0f);
  const auto reduce_once = [&] {
    gloo::AllreduceOptions options(context);
    options.setInput(input.data(), count);
    options.setOutput(output.data(), count);
    options.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
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
  const CheckInfo& check() const override { return checks::kAllreduceGloo; }
  std::string unavailable() override { return ""; }

  std::string prepare(const CollectiveSetup& setup, bool) override {
    device_ = gloo_device(setup.data_address);
    return "";
  }

  std::vector<AllreduceTiming> run(Group& group, const CollectiveSetup& setup, const std::string&,
                                   const std::vector<AllreduceSize>& sizes) override {
    const auto context = connect_gloo(*group.store(), "gloo", group.index(), static_cast<int>(group.members().size()),
                                      device_, setup.timeout);
    std::vector<AllreduceTiming> timings;
    uint32_t tag = 0;
    for (const auto& size : sizes) timings.push_back(time_size(context, size, fill_value(group.index()), tag));
    return timings;
  }

 private:
  std::shared_ptr<gloo::transport::Device> device_;
};

}  // namespace

std::shared_ptr<gloo::transport::Device> gloo_device(const std::string& address) {
  if (address.empty()) throw std::runtime_error("no usable address on this rank's interface");
  gloo::transport::tcp::attr attr;
  attr.hostname = address;
  return gloo::transport::tcp::CreateDevice(attr);
}

std::shared_ptr<gloo::Context> connect_gloo(StoreClient& store, const std::string& prefix, int rank, int size,
                                            const std::shared_ptr<gloo::transport::Device>& device,
                                            std::chrono::milliseconds timeout) {
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
  context->setTimeout(timeout);
  const auto keys = std::make_shared<PrefixedStore>(store, prefix + "/", Deadline::after(timeout));
  auto shared_device = device;
  connect_full_mesh(*context, keys, shared_device, 0);
  return context;
}

std::unique_ptr<AllreduceBackend> make_gloo_backend() { return std::make_unique<GlooBackend>(); }

}  // namespace ddp::doctor
