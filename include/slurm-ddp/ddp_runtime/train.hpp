#pragma once
// slurm-ddp's C++ API: ddp-train's distributed data-parallel training, for a model and data set of your own.
//
//   #include <ddp_runtime/train.hpp>
//
//   struct NetImpl : torch::nn::Module { ...; at::Tensor forward(const at::Tensor& x); };  TORCH_MODULE(Net);
//   class Points : public ddp::runtime::Dataset {  // size(), get_batch(indices) -> {inputs, targets}, name()
//     ...
//   };
//   int main(int argc, char** argv) {
//     return ddp::runtime::train_main(argc, argv, [](const ddp::runtime::TrainOptions& options) {
//       ddp::runtime::TrainingJob job;
//       job.model = ddp::runtime::module_model(Net());       // any module with at::Tensor forward(at::Tensor)
//       job.data = std::make_unique<Points>(options.samples);
//       job.loss = ddp::runtime::LossKind::CrossEntropy;       // or MeanSquaredError, NegativeLogLikelihood
//       return job;
//     });
//   }
//
//   CMake: find_package(SlurmDDP REQUIRED)  target_link_libraries(prog PRIVATE SlurmDDP::ddp_runtime)
//
// The program then starts as ddp-train does (srun --ddp prog 50 10; torchrun's RANK, WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT; mpirun -np 4 prog 50 10; or alone), takes ddp-train's options and positionals (prog --help:
// --batch-size, --optimizer, --lr, --snapshot-dir, --resume, --backend, ...), and does on every rank:
//   1. the process group from the environment: Gloo, NCCL on GPUs, or MPI (--backend, DDP_BACKEND);
//   2. torch.manual_seed(--seed), then make_job(options): the same seed gives every rank the same model;
//   3. checks before the first step: the model's forward on the first batch and the loss on its output; a
//      ddp::Error thrown by make_job or a check on any rank stops every rank with that message (exit status 2);
//   4. resume from the newest valid snapshot in --snapshot-dir (or --resume FILE), refusing one of another
//      model, optimizer or --seed;
//   5. data parallelism as torch.nn.parallel.DistributedDataParallel does it: parameters and buffers broadcast
//      from rank 0, gradients averaged by c10d's Reducer in buckets overlapping backward, buffers broadcast
//      before every forward;
//   6. per epoch, DistributedSampler's indices (PyTorch's order for the same seed, epoch, rank and world size)
//      in batches of --batch-size, --accumulate batches per optimizer step (torch.optim's SGD or AdamW,
//      clipping, a learning-rate schedule); the seed script's lines: "[CPU0] Epoch 0 | Batchsize: 32 | Steps:
//      32", then on rank 0 "Epoch 0 | Loss: ... | Samples/s: ... | ETA: ...";
//   7. snapshots by rank 0 every save_every epochs and --snapshot-every-seconds, in the background (a dict
//      torch.load reads); SIGUSR2 stops every rank at one step after a snapshot (exit status 75); running the
//      same command resumes bit for bit;
//   8. the final model: --output, a state dict (model.load_state_dict(torch.load(path))), and for a model that
//      can, --output-script, a TorchScript file (torch.jit.load(path)).
// Exit status of train_main: 0 done, 1 failure (a peer died, I/O), 2 bad input (one line naming the value and the
// fix), 75 stopped on request. The loop itself is not part of the API: its pieces (the process group, the DDP
// module, the sampler, the optimizer, the snapshot files) are private to the runtime and change with it; a program
// decides what is trained (TrainingJob) and takes ddp-train's options, nothing more. The installed API is this
// header, job.hpp, train_options.hpp, and the two core headers they need (core/error.hpp, core/backend.hpp).
#include <torch/nn/modules/container/any.h>

#include <functional>
#include <memory>
#include <utility>

#include "ddp_runtime/job.hpp"
#include "ddp_runtime/train_options.hpp"

namespace ddp::runtime {

// Exit status after a stop request (SIGUSR2, SIGTERM, SIGINT) was honoured with a snapshot: EX_TEMPFAIL, "try
// again later"; ddp-restart requeues the job on it.
constexpr int kExitStopped = 75;

using JobFactory = std::function<TrainingJob(const TrainOptions& options)>;

// main() of a training program: ddp-train's command line, the launcher's environment, the training above, and
// errors printed as one line "<program>: <message>" with exit status 2 (bad input) or 1. Returns 0 when every epoch
// ran, kExitStopped after a stop request.
int train_main(int argc, char** argv, const JobFactory& make_job);

// ddp-train's own job factory: its built-in workloads (--workload seed, mlp, fashion-mnist) and a TorchScript module
// on data files (--model, --data). ddp-train is train_main(argc, argv, make_workload); a program of its own may hand
// the options it does not handle itself to it.
TrainingJob make_workload(const TrainOptions& options);

// A torch::nn module (a ModuleHolder such as Net, or a std::shared_ptr to one) whose forward takes one tensor.
template <class Module>
std::unique_ptr<Model> module_model(Module module) {
  return module_model(torch::nn::AnyModule(std::move(module)));
}

}  // namespace ddp::runtime
