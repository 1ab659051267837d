#include "ddp_runtime/workloads.hpp"

#include <ATen/Context.h>
#include <ATen/Functions.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>

#include <sys/stat.h>

#include "ddp_runtime/data_files.hpp"
#include "ddp_runtime/idx.hpp"
#include "ddp_runtime/script_model.hpp"
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

class ModuleModel : public Model {
 public:
  explicit ModuleModel(torch::nn::AnyModule module) : module_(std::move(module)) {}
  NamedTensors named_parameters() override { return entries(module_.ptr()->named_parameters()); }
  NamedTensors named_buffers() override { return entries(module_.ptr()->named_buffers()); }
  at::Tensor forward(const at::Tensor& input) override { return module_.forward(input); }
  void train(bool on) override { module_.ptr()->train(on); }
  void to(c10::Device device) override { module_.ptr()->to(device); }

 private:
  static NamedTensors entries(const torch::OrderedDict<std::string, at::Tensor>& items) {
    NamedTensors result;
    for (const auto& item : items) result.emplace_back(item.key(), item.value());
    return result;
  }
  torch::nn::AnyModule module_;
};

// datautils.MyTrainDataset(size): size pairs of (torch.rand(20), torch.rand(1)), drawn in that order.
std::unique_ptr<Dataset> my_train_dataset(int64_t size) {
  std::vector<at::Tensor> inputs;
  std::vector<at::Tensor> targets;
  for (int64_t i = 0; i < size; ++i) {
    inputs.push_back(at::rand({kFeatures}));
    targets.push_back(at::rand({1}));
  }
  return std::make_unique<TensorDataset>(at::stack(inputs), at::stack(targets), "the seed's MyTrainDataset");
}

// train-images-idx3-ubyte and train-labels-idx1-ubyte from dir or from dir/FashionMNIST/raw (torchvision's
// layout); pixels scaled to [0, 1] as ToTensor does.
std::unique_ptr<Dataset> fashion_mnist(const std::string& dir) {
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
  return std::make_unique<TensorDataset>(pixels, tensor_from(labels, {labels.dims[0]}).to(at::kLong), found);
}

// The user's TorchScript module on the user's files; without --loss, class indices mean cross-entropy.
TrainingJob script_workload(const TrainOptions& options) {
  TrainingJob job;
  job.model = load_script_model(options.model);
  job.data = open_data_files(options.data);
  job.model_name = options.model;
  const bool class_indices = !job.data->get_batch(at::zeros({1}, at::kLong)).targets.is_floating_point();
  job.loss = options.loss.value_or(class_indices ? LossKind::CrossEntropy : LossKind::MeanSquaredError);
  return job;
}

}  // namespace

std::unique_ptr<Model> module_model(torch::nn::AnyModule module) {
  return std::make_unique<ModuleModel>(std::move(module));
}

TensorDataset::TensorDataset(at::Tensor inputs, at::Tensor targets, std::string name)
    : inputs_(std::move(inputs)), targets_(std::move(targets)), name_(std::move(name)) {
  if (inputs_.dim() == 0 || targets_.dim() == 0 || inputs_.size(0) != targets_.size(0)) {
    throw Error(name_ + ": inputs and targets must hold the same number of samples along their first dimension");
  }
}

Batch TensorDataset::get_batch(const at::Tensor& indices) const {
  return {inputs_.index_select(0, indices), targets_.index_select(0, indices)};
}

TrainingJob make_workload(const TrainOptions& options) {
  if (!options.model.empty()) return script_workload(options);
  TrainingJob job;
  job.model_name = std::string("--workload ") + to_string(options.workload);
  switch (options.workload) {
    case WorkloadKind::Seed:
      job.data = my_train_dataset(options.samples);
      job.model = module_model(torch::nn::AnyModule(torch::nn::Linear(kFeatures, 1)));
      break;
    case WorkloadKind::Mlp:
      job.data = my_train_dataset(options.samples);
      job.model = module_model(torch::nn::AnyModule(mlp(options.width)));
      job.model_name += " --width " + std::to_string(options.width);
      break;
    case WorkloadKind::FashionMnist:
      job.data = fashion_mnist(options.data);
      job.model = module_model(torch::nn::AnyModule(QuickstartNet()));
      job.loss = LossKind::CrossEntropy;
      break;
  }
  job.loss = options.loss.value_or(job.loss);
  return job;
}

at::Tensor compute_loss(LossKind loss, const at::Tensor& output, const at::Tensor& target) {
  switch (loss) {
    case LossKind::MeanSquaredError: return at::mse_loss(output, target.to(output.scalar_type()));
    case LossKind::CrossEntropy:
      return at::cross_entropy_loss(
          output, target.is_floating_point() ? target.to(output.scalar_type()) : target.to(at::kLong));
    case LossKind::NegativeLogLikelihood: return at::nll_loss_nd(output, target.to(at::kLong));
  }
  return {};
}

}  // namespace ddp::runtime
