#include "ddp_runtime/workloads.hpp"

#include <ATen/Context.h>
#include <ATen/Functions.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>

#include <sys/stat.h>

#include "ddp_runtime/idx.hpp"
#include "error.hpp"

namespace ddp::runtime {
namespace {

constexpr int64_t kFeatures = 20;  // MyTrainDataset's input size
constexpr int64_t kImageSide = 28;

// The quickstart's NeuralNetwork, with its attribute names: flatten, linear_relu_stack.{0,2,4}.
struct QuickstartNetImpl : torch::nn::Module {
  QuickstartNetImpl()
      : flatten(register_module("flatten", torch::nn::Flatten())),
        linear_relu_stack(register_module(
            "linear_relu_stack",
            torch::nn::Sequential(torch::nn::Linear(kImageSide * kImageSide, 512), torch::nn::ReLU(),
                                  torch::nn::Linear(512, 512), torch::nn::ReLU(), torch::nn::Linear(512, 10)))) {}

  at::Tensor forward(const at::Tensor& x) { return linear_relu_stack->forward(flatten->forward(x)); }

  torch::nn::Flatten flatten;
  torch::nn::Sequential linear_relu_stack;
};
TORCH_MODULE(QuickstartNet);

// nn.Sequential with a plain forward, which AnyModule requires; the parameters keep Sequential's names (0.weight).
struct MlpImpl : torch::nn::SequentialImpl {
  using SequentialImpl::SequentialImpl;
  at::Tensor forward(const at::Tensor& x) { return SequentialImpl::forward(x); }
};
TORCH_MODULE(Mlp);

Mlp mlp(int64_t width) {
  return Mlp(torch::nn::Linear(kFeatures, width), torch::nn::ReLU(), torch::nn::Linear(width, width), torch::nn::ReLU(),
             torch::nn::Linear(width, width), torch::nn::ReLU(), torch::nn::Linear(width, 1));
}

bool is_file(const std::string& path) {
  struct stat info;
  return stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode);
}

std::string fashion_mnist_dir(const std::string& dir) {
  for (const std::string& candidate : {dir, dir + "/FashionMNIST/raw"}) {
    if (is_file(candidate + "/train-images-idx3-ubyte")) return candidate;
  }
  throw Error("--data " + dir +
              " has no train-images-idx3-ubyte (nor FashionMNIST/raw/ under it); put the "
              "uncompressed FashionMNIST training files there");
}

at::Tensor tensor_from(const IdxArray& array, at::IntArrayRef sizes) {
  return at::from_blob(const_cast<uint8_t*>(array.bytes.data()), sizes, at::kByte).clone();
}

}  // namespace

Dataset my_train_dataset(int64_t size) {
  std::vector<at::Tensor> inputs;
  std::vector<at::Tensor> targets;
  for (int64_t i = 0; i < size; ++i) {
    inputs.push_back(at::rand({kFeatures}));
    targets.push_back(at::rand({1}));
  }
  return {at::stack(inputs), at::stack(targets)};
}

Dataset fashion_mnist(const std::string& dir) {
  const std::string found = fashion_mnist_dir(dir);
  const IdxArray images = read_idx_file(found + "/train-images-idx3-ubyte");
  const IdxArray labels = read_idx_file(found + "/train-labels-idx1-ubyte");
  if (images.dims.size() != 3 || images.dims[1] != kImageSide || images.dims[2] != kImageSide) {
    throw Error(found + "/train-images-idx3-ubyte does not hold 28x28 images; the quickstart network needs them");
  }
  if (labels.dims.size() != 1 || labels.dims[0] != images.dims[0]) {
    throw Error(found + "/train-labels-idx1-ubyte does not hold one label per image (" +
                std::to_string(images.dims[0]) + " images)");
  }
  at::Tensor pixels = tensor_from(images, {images.dims[0], 1, kImageSide, kImageSide}).to(at::kFloat).div_(255);
  return {pixels, tensor_from(labels, {labels.dims[0]}).to(at::kLong)};
}

Workload make_workload(const TrainOptions& options) {
  at::manual_seed(options.seed);
  Workload workload;
  switch (options.workload) {
    case WorkloadKind::Seed:
      workload.data = my_train_dataset(options.samples);
      workload.model = torch::nn::AnyModule(torch::nn::Linear(kFeatures, 1));
      break;
    case WorkloadKind::Mlp:
      workload.data = my_train_dataset(options.samples);
      workload.model = torch::nn::AnyModule(mlp(options.width));
      break;
    case WorkloadKind::FashionMnist:
      workload.data = fashion_mnist(options.data_dir);
      workload.model = torch::nn::AnyModule(QuickstartNet());
      workload.loss = LossKind::CrossEntropy;
      break;
  }
  return workload;
}

at::Tensor compute_loss(LossKind loss, const at::Tensor& output, const at::Tensor& target) {
  return loss == LossKind::CrossEntropy ? at::cross_entropy_loss(output, target) : at::mse_loss(output, target);
}

}  // namespace ddp::runtime
