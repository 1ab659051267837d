#include "ddp_runtime/training/script_model.hpp"

#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/csrc/jit/serialization/import.h>

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <ostream>
#include <sstream>
#include <streambuf>

#include "core/error.hpp"
#include "ddp_runtime/common/error_message.hpp"
#include "ddp_runtime/snapshots/snapshot_files.hpp"

namespace ddp::runtime {
namespace {

const char kModelSaveHint[] =
    "save the model with torch.jit.script(model).save(path) or torch.jit.trace(model, example).save(path)";

// Module::save writes to a stream; this one goes straight into the atomic file.
class FileBuffer : public std::streambuf {
 public:
  explicit FileBuffer(AtomicFile& file) : file_(file) {}

 protected:
  std::streamsize xsputn(const char* data, std::streamsize size) override {
    file_.write(data, static_cast<std::size_t>(size));
    return size;
  }
  int_type overflow(int_type c) override {
    if (c != traits_type::eof()) {
      const char byte = traits_type::to_char_type(c);
      file_.write(&byte, 1);
    }
    return traits_type::not_eof(c);
  }

 private:
  AtomicFile& file_;
};

class ScriptModel : public Model {
 public:
  ScriptModel(torch::jit::Module module, std::string path) : module_(std::move(module)), path_(std::move(path)) {}

  NamedTensors named_parameters() override {
    NamedTensors result;
    for (const auto& item : module_.named_parameters()) result.emplace_back(item.name, item.value);
    return result;
  }
  NamedTensors named_buffers() override {
    NamedTensors result;
    for (const auto& item : module_.named_buffers()) result.emplace_back(item.name, item.value);
    return result;
  }
  at::Tensor forward(const at::Tensor& input) override {
    const c10::IValue output = module_.forward({input});
    if (!output.isTensor()) throw Error(path_ + ": forward returned a " + output.tagKind() + ", expected one tensor");
    return output.toTensor();
  }
  void train(bool on) override { module_.train(on); }
  void to(c10::Device device) override { module_.to(device); }

  // Written from the CPU, so that torch.jit.load works on a machine without the GPU it was trained on.
  bool write_torchscript(const std::string& path) override {
    module_.to(c10::Device(c10::kCPU));
    AtomicFile file(path);
    FileBuffer buffer(file);
    std::ostream out(&buffer);
    module_.save(out);
    out.flush();
    file.commit();
    return true;
  }

 private:
  torch::jit::Module module_;
  std::string path_;
};

bool is_tensor(const c10::TypePtr& type) { return type->kind() == c10::TypeKind::TensorType; }

// forward(self, x: Tensor, <arguments with defaults>) -> Tensor
void check_forward(const torch::jit::Module& module, const std::string& path) {
  const auto forward = module.find_method("forward");
  if (!forward) throw Error(path + " is a TorchScript module without a forward method; " + kModelSaveHint);
  const c10::FunctionSchema& schema = forward->function().getSchema();
  const auto& arguments = schema.arguments();
  bool fits = arguments.size() >= 2 && is_tensor(arguments[1].type());
  for (std::size_t i = 2; i < arguments.size(); ++i) fits = fits && arguments[i].default_value().has_value();
  fits = fits && schema.returns().size() == 1 && is_tensor(schema.returns()[0].type());
  if (!fits) {
    std::ostringstream signature;
    signature << schema;
    throw Error(path + ": its forward is " + signature.str() +
                "; ddp-train calls forward with one tensor (a batch of "
                "inputs) and needs one tensor back");
  }
}

}  // namespace

std::unique_ptr<Model> load_script_model(const std::string& path) {
  struct stat info;
  if (stat(path.c_str(), &info) != 0) throw Error("--model " + path + ": " + std::strerror(errno));
  if (!S_ISREG(info.st_mode)) throw Error("--model " + path + " is not a file; " + kModelSaveHint);
  // The graph executor's optimisations (profiling, then differentiable subgraphs) change how gradients are
  // computed after the first runs, so that a resumed run would not repeat the bits of an uninterrupted one.
  torch::jit::setGraphExecutorOptimize(false);
  torch::jit::Module module;
  try {
    module = torch::jit::load(path, c10::Device(c10::kCPU));
  } catch (const c10::Error& e) {
    const std::string why = error_summary(e);
    const bool weights_only = why.find("constants.pkl") != std::string::npos;
    throw Error(path + " is not a TorchScript module (" +
                (weights_only ? std::string("it looks like tensors saved by torch.save") : why) + "); " +
                kModelSaveHint);
  }
  check_forward(module, path);
  module.train(true);
  return std::make_unique<ScriptModel>(std::move(module), path);
}

}  // namespace ddp::runtime
