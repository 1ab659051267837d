#include "ddp_runtime/training/workloads.hpp"

#include <ATen/Context.h>
#include <ATen/Functions.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>

#include <sys/stat.h>

#include <string>
#include <vector>

#include "base/command_line.hpp"
#include "core/error.hpp"
#include "ddp_runtime/common/tensor_text.hpp"
#include "ddp_runtime/data/data_files.hpp"
#include "ddp_runtime/data/idx.hpp"
#include "ddp_runtime/train.hpp"
#include "ddp_runtime/training/kind_table.hpp"
#include "ddp_runtime/training/script_model.hpp"

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

// The trainer calls torch.manual_seed(options.seed) first; the data and the model are then built in the order
// the seed script builds them, so that a Python script doing the same gets the same samples and initial weights.
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

// --- the losses: one table entry each, with how PyTorch computes it and which targets it takes. A new loss is a
// LossKind, its name in cli.cpp's table of names, and an entry here. ---
namespace {

struct Loss {
  LossKind kind;
  at::Tensor (*compute)(const at::Tensor& output, const at::Tensor& target);
  bool takes_class_indices;       // targets [batch, ...] of an integer type, for outputs [batch, classes, ...]
  bool takes_same_shaped_floats;  // floating-point targets shaped like the output (cross-entropy: probabilities)
};

const Loss kLosses[] = {
    {LossKind::MeanSquaredError,
     [](const at::Tensor& output, const at::Tensor& target) {
       return at::mse_loss(output, target.to(output.scalar_type()));
     },
     false, true},
    {LossKind::CrossEntropy,
     [](const at::Tensor& output, const at::Tensor& target) {
       return at::cross_entropy_loss(
           output, target.is_floating_point() ? target.to(output.scalar_type()) : target.to(at::kLong));
     },
     true, true},
    {LossKind::NegativeLogLikelihood,
     [](const at::Tensor& output, const at::Tensor& target) { return at::nll_loss_nd(output, target.to(at::kLong)); },
     true, false},
};

const Loss& loss_of(LossKind kind) { return entry_of(kLosses, kind, "loss", "the table of losses (workloads.cpp)"); }

// "--loss cross-entropy or nll": the losses that take class indices.
std::string losses_for_class_indices() {
  std::vector<std::string> names;
  for (const Loss& loss : kLosses) {
    if (loss.takes_class_indices) names.emplace_back(to_string(loss.kind));
  }
  return "--loss " + cli::listed(names);
}

void check_class_indices(const TrainingJob& job, const at::Tensor& output, const at::Tensor& targets) {
  const int64_t classes = output.size(1);
  job.data->check_class_labels(classes);
  const int64_t low = targets.min().item<int64_t>();
  const int64_t high = targets.max().item<int64_t>();
  if (low < 0 || high >= classes) {
    throw Error(job.data->name() + " holds the class index " + std::to_string(low < 0 ? low : high) + ", but " +
                job.model_name + " outputs " + std::to_string(classes) + " classes; expected indices 0 to " +
                std::to_string(classes - 1));
  }
}

}  // namespace

at::Tensor compute_loss(LossKind loss, const at::Tensor& output, const at::Tensor& target) {
  return loss_of(loss).compute(output, target);
}

void check_loss_fits(const TrainingJob& job, const at::Tensor& output, const at::Tensor& targets) {
  const Loss& loss = loss_of(job.loss);
  const std::string option = std::string("--loss ") + to_string(job.loss);
  const std::string outputs = job.model_name + " outputs " + tensor_text(output) + " for a batch of " +
                              std::to_string(targets.size(0)) + " and the targets 'y' of " + job.data->name() +
                              " are " + tensor_text(targets);
  if (!output.is_floating_point()) throw Error(outputs + "; a loss needs floating-point outputs");
  std::vector<int64_t> class_shape = output.sizes().vec();
  if (output.dim() >= 2) class_shape.erase(class_shape.begin() + 1);
  const bool indices = loss.takes_class_indices && !targets.is_floating_point() && output.dim() >= 2 &&
                       targets.sizes().vec() == class_shape;
  const bool same_shaped = loss.takes_same_shaped_floats && targets.is_floating_point() &&
                           (!loss.takes_class_indices || output.dim() >= 2) && targets.sizes() == output.sizes();
  if (indices) check_class_indices(job, output, targets);
  if (indices || same_shaped) return;
  if (!loss.takes_class_indices) {
    throw Error(outputs + "; " + option + " needs floating-point targets shaped like the output (class indices take " +
                losses_for_class_indices() + ")");
  }
  throw Error(outputs + "; " + option +
              " needs outputs [batch, classes, ...] and class indices [batch, ...] (an integer type)" +
              (loss.takes_same_shaped_floats ? " or class probabilities shaped like the output" : ""));
}

}  // namespace ddp::runtime
