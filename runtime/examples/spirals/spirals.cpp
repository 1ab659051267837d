// Three interleaved spirals, told apart by a small MLP: a model (torch::nn::Module) and a data set of this program's
// own, trained with slurm-ddp's runtime. Runs like ddp-train, with its options:
//   srun --ddp spirals 20 5                       (Slurm with the ddp plugin)
//   RANK=0 WORLD_SIZE=2 MASTER_ADDR=... MASTER_PORT=... spirals 20 5
//   spirals --samples 3000 --optimizer adamw --lr 0.01 20 5
#include <ddp_runtime/train.hpp>

#include <torch/nn/modules/linear.h>
#include <torch/types.h>

#include <cmath>

namespace {

constexpr int64_t kArms = 3;

struct SpiralNetImpl : torch::nn::Module {
  SpiralNetImpl()
      : hidden(register_module("hidden", torch::nn::Linear(2, 64))),
        more(register_module("more", torch::nn::Linear(64, 64))),
        out(register_module("out", torch::nn::Linear(64, kArms))) {}

  at::Tensor forward(const at::Tensor& points) {
    return out->forward(torch::relu(more->forward(torch::tanh(hidden->forward(points)))));
  }

  torch::nn::Linear hidden, more, out;
};
TORCH_MODULE(SpiralNet);

// Point i lies on arm i % 3 at a radius growing with i: no randomness, the same on every rank.
class Spirals : public ddp::runtime::Dataset {
 public:
  explicit Spirals(int64_t size) : size_(size) {}
  int64_t size() const override { return size_; }
  std::string name() const override { return "spirals(" + std::to_string(size_) + ")"; }

  ddp::runtime::Batch get_batch(const at::Tensor& indices) const override {
    const at::Tensor i = indices.to(at::kDouble);
    const at::Tensor arm = indices.remainder(kArms);
    const at::Tensor radius = (i + 1) / static_cast<double>(size_);
    const at::Tensor angle = radius * 4 * M_PI + arm.to(at::kDouble) * (2 * M_PI / kArms);
    const at::Tensor points = at::stack({radius * angle.cos(), radius * angle.sin()}, 1).to(at::kFloat);
    return {points, arm};
  }

 private:
  int64_t size_;
};

}  // namespace

int main(int argc, char** argv) {
  return ddp::runtime::train_main(argc, argv, [](const ddp::runtime::TrainOptions& options) {
    ddp::runtime::TrainingJob job;
    job.model = ddp::runtime::module_model(SpiralNet());
    job.data = std::make_unique<Spirals>(options.samples);
    job.loss = ddp::runtime::LossKind::CrossEntropy;
    job.model_name = "SpiralNet";
    return job;
  });
}
