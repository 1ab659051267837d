"""Python's side of the --model tests, with Debian's python3-torch: scripted modules, data files, and the same
training in Python DDP (Gloo, ranks from the torchrun variables) to compare ddp-train with.

  model_io.py make-model KIND PATH [--trace]    KIND: mlp, mlp-log-softmax (the mlp ending in log_softmax), cnn,
                                                two-inputs, tuple-output; torch.manual_seed(0)
  model_io.py make-data KIND PATH [--npy]       KIND: mlp (x [N, 8], 4 classes), cnn (x [N, 1, 8, 8], 10 classes),
                                                regression (x [N, 8], y [N, 4]); N from --samples; a .pt file,
                                                or with --npy a directory of x.npy and y.npy
  model_io.py train MODEL DATA OUT [options]   Python DDP from MODEL's weights on DATA; rank 0 saves the final
                                                state_dict to OUT and prints "Trained ... samples/s" as ddp-train
  model_io.py train-seed OUT [options]         ddp-train's seed workload (--workload seed) in Python DDP: the same
                                                data and Linear(20,1) from --seed, mse loss; rank 0 saves to OUT
  model_io.py continue KIND SNAPSHOT DATA OUT [options]
                                                the original nn.Module and torch.optim optimizer loaded from a
                                                ddp-train snapshot, trained to the end in Python DDP
  model_io.py split DATA N PT DIR               the first N samples of DATA to the file PT, the rest to DIR/*.npy
  model_io.py make-bad-data DIR                every case of bad data: DIR/CASE.pt for missing-key, rows, not-dict,
                                                truncated-pt, float64-x, short-x; the directory DIR/CASE for
                                                truncated-npy, big-endian-npy
  model_io.py run-script PATH STATE             torch.jit.load(PATH) against the eager module with STATE loaded:
                                                prints "same outputs" when they agree
options: --epochs N --batch-size N --seed N --optimizer sgd|adamw --lr X --momentum X --weight-decay X
         --clip-grad-norm X --lr-schedule constant|step|cosine --lr-step-epochs N --lr-gamma X --warmup-steps N
         --loss mse|cross-entropy|nll --accumulate N --backend gloo|nccl (nccl: each rank on cuda:LOCAL_RANK)
         train-seed: --epochs --batch-size --seed --lr --samples --backend
"""
import argparse
import contextlib
import math
import os
import time
import warnings

import numpy
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

# PyTorch on Python 3.14 warns that torch.jit.load "is not supported in Python 3.14+ and may break" (Debian 14's
# stack): the TorchScript files under test here still load and run, and the warning would pass for their output.
warnings.filterwarnings("ignore", message=r"`torch\.jit\.load` is not supported", category=FutureWarning)
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import TensorDataset

from torch.utils.data.distributed import DistributedSampler

# As ddp-train runs TorchScript (script_model.cpp): without the graph executor's optimisations. With them, PyTorch
# 2.6's profiling executor turns the module into differentiable subgraphs, and DDP's backward on Gloo never ends.
torch._C._set_graph_executor_optimize(False)


class Mlp(nn.Module):
    def __init__(self, width=32, log_probabilities=False):
        super().__init__()
        self.fc1 = nn.Linear(8, width)
        self.fc2 = nn.Linear(width, width)
        self.out = nn.Linear(width, 4)
        self.log_probabilities = log_probabilities

    def forward(self, x):
        logits = self.out(torch.relu(self.fc2(torch.relu(self.fc1(x)))))
        return F.log_softmax(logits, dim=1) if self.log_probabilities else logits


class SmallCnn(nn.Module):
    """A convolution with batch norm (buffers that change every forward) and dropout (the random generator)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.drop = nn.Dropout(0.1)
        self.fc = nn.Linear(4 * 4 * 4, 10)

    def forward(self, x):
        x = F.max_pool2d(torch.relu(self.bn(self.conv(x))), 2)
        return self.fc(self.drop(torch.flatten(x, 1)))


class TwoInputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x, y):
        return self.fc(x) + y


class TupleOutput(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        return self.fc(x), x


def LogSoftmaxMlp(width=32):
    return Mlp(width, log_probabilities=True)


MODELS = {"mlp": Mlp, "mlp-log-softmax": LogSoftmaxMlp, "cnn": SmallCnn, "two-inputs": TwoInputs,
          "tuple-output": TupleOutput}
INPUTS = {"mlp": (8,), "mlp-log-softmax": (8,), "cnn": (1, 8, 8), "two-inputs": (8,), "tuple-output": (8,)}
WIDE = ("mlp", "mlp-log-softmax")


def make_model(kind, path, trace, width):
    torch.manual_seed(0)
    model = MODELS[kind](width) if kind in WIDE else MODELS[kind]()
    if trace:
        model.eval()
        torch.jit.trace(model, torch.rand(2, *INPUTS[kind])).save(path)
    else:
        torch.jit.script(model).save(path)


def save(x, y, path, npy):
    if npy:
        os.makedirs(path, exist_ok=True)
        numpy.save(os.path.join(path, "x.npy"), x.numpy())
        numpy.save(os.path.join(path, "y.npy"), y.numpy())
    else:
        torch.save({"x": x, "y": y}, path)


def make_data(kind, path, npy, samples, seed, classes):
    torch.manual_seed(seed)
    if kind == "cnn":
        x, y = torch.rand(samples, 1, 8, 8), torch.randint(0, classes or 10, (samples,))
    elif kind == "regression":
        x, y = torch.rand(samples, 8), torch.rand(samples, 4)
    else:
        x, y = torch.rand(samples, 8), torch.randint(0, classes or 4, (samples,))
    save(x, y, path, npy)


def split(data, first, pt, directory):
    data = torch.load(data)
    save(data["x"][:first], data["y"][:first], pt, False)
    save(data["x"][first:], data["y"][first:], directory, True)


def truncate(path):
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) * 2 // 3)


def make_bad_data(directory):
    """All cases in one Python: each start of torch takes seconds on a loaded machine."""
    torch.manual_seed(0)
    x, y = torch.rand(20, 8), torch.randint(0, 4, (20,))

    def pt(case):
        return os.path.join(directory, case + ".pt")

    torch.save({"inputs": x, "y": y}, pt("missing-key"))
    torch.save({"x": x, "y": y[:19]}, pt("rows"))
    torch.save([x, y], pt("not-dict"))
    torch.save({"x": x, "y": y}, pt("truncated-pt"))
    truncate(pt("truncated-pt"))
    torch.save({"x": x.double(), "y": y}, pt("float64-x"))
    torch.save({"x": x[:, :7], "y": y}, pt("short-x"))
    save(x, y, os.path.join(directory, "truncated-npy"), True)
    truncate(os.path.join(directory, "truncated-npy", "x.npy"))
    save(x, y, os.path.join(directory, "big-endian-npy"), True)
    numpy.save(os.path.join(directory, "big-endian-npy", "x.npy"), x.numpy().astype(">f4"))


def load_data(paths):
    xs, ys = [], []
    for path in paths.split(","):
        if os.path.isdir(path):
            xs.append(torch.from_numpy(numpy.load(os.path.join(path, "x.npy"))))
            ys.append(torch.from_numpy(numpy.load(os.path.join(path, "y.npy"))))
        else:
            data = torch.load(path)
            xs.append(data["x"])
            ys.append(data["y"])
    return TensorDataset(torch.cat(xs), torch.cat(ys))


def lr_at(args, step, epoch, total_steps):
    """ddp-train's --lr-schedule: StepLR stepped per epoch; cosine as transformers' get_cosine_schedule_with_warmup."""
    if args.lr_schedule == "step":
        return args.lr * args.lr_gamma ** (epoch // args.lr_step_epochs)
    if args.lr_schedule == "cosine":
        if step < args.warmup_steps:
            return args.lr * step / args.warmup_steps
        progress = (step - args.warmup_steps) / max(1, total_steps - args.warmup_steps)
        return args.lr * max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))
    return args.lr


def make_optimizer(args, parameters):
    if args.optimizer == "adamw":
        decay = 0.01 if args.weight_decay is None else args.weight_decay
        return torch.optim.AdamW(parameters, lr=args.lr, weight_decay=decay)
    return torch.optim.SGD(parameters, lr=args.lr, momentum=args.momentum, weight_decay=args.weight_decay or 0.0)


def loss_of(args, output, target):
    if args.loss == "mse":
        return F.mse_loss(output, target)
    if args.loss == "nll":
        return F.nll_loss(output, target)
    return F.cross_entropy(output, target)


def train_ddp(args, model, dataset, optimizer, first_epoch, first_step):
    """The DataLoader's batches without the DataLoader, which draws a seed from the global generator for every
    epoch's iterator: dropout would then see other random numbers than in ddp-train. With --accumulate N, N
    batches per optimizer step (the epoch's last step may have fewer), each loss divided by their number, and
    gradients synchronised on the last only (no_sync on the others)."""
    device = device_of(args)
    ddp = DDP(model, device_ids=[device.index]) if device.type == "cuda" else DDP(model)
    sampler = DistributedSampler(dataset, seed=args.seed)
    batches_per_epoch = math.ceil(len(sampler) / args.batch_size)
    total_steps = args.epochs * math.ceil(batches_per_epoch / args.accumulate)
    step = first_step
    for epoch in range(first_epoch, args.epochs):
        sampler.set_epoch(epoch)
        order = list(sampler)
        starts = list(range(0, len(order), args.batch_size))
        for first in range(0, len(starts), args.accumulate):
            group = starts[first:first + args.accumulate]
            optimizer.zero_grad()
            for i, start in enumerate(group):
                x, y = (t.to(device) for t in dataset[order[start:start + args.batch_size]])
                with ddp.no_sync() if i + 1 < len(group) else contextlib.nullcontext():
                    (loss_of(args, ddp(x), y) / len(group)).backward()
            if args.clip_grad_norm > 0:
                torch.nn.utils.clip_grad_norm_(ddp.parameters(), args.clip_grad_norm)
            for param_group in optimizer.param_groups:
                param_group["lr"] = lr_at(args, step, epoch, total_steps)
            optimizer.step()
            step += 1


def device_of(args):
    """nccl: this rank's GPU, cuda:LOCAL_RANK, as ddp-train takes it; gloo: the CPU."""
    if getattr(args, "backend", "gloo") == "nccl":
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device("cpu")


def start_group(args):
    device = device_of(args)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(getattr(args, "backend", "gloo"))
    return device


def save_final(model, path):
    if dist.get_rank() == 0:
        torch.save({k: v.detach().cpu().clone() for k, v in model.state_dict().items()}, path)


def timed_training(args, model, dataset, optimizer):
    """train_ddp, then rank 0's "Trained N epochs (S samples) in T s: R samples/s", counted as ddp-train counts
    them: every rank's samples of every epoch (DistributedSampler's padding included)."""
    device = device_of(args)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    train_ddp(args, model, dataset, optimizer, 0, 0)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - start
    samples = len(DistributedSampler(dataset)) * dist.get_world_size() * args.epochs
    if dist.get_rank() == 0:
        print(f"Trained {args.epochs} epochs ({samples} samples) in {seconds:.3f} s: {samples / seconds:.0f} samples/s",
              flush=True)


def train(args):
    device = start_group(args)
    torch.manual_seed(args.seed)
    model = torch.jit.load(args.model).to(device)
    timed_training(args, model, load_data(args.data), make_optimizer(args, model.parameters()))
    save_final(model, args.out)
    dist.destroy_process_group()


def train_seed(args):
    """ddp-train --workload seed: at::manual_seed(--seed), then the seed's MyTrainDataset (pairs of rand(20),
    rand(1), drawn in that order), then Linear(20, 1) (workloads.cpp), all on the CPU generator."""
    args.loss = "mse"  # the seed workload's loss
    device = start_group(args)
    torch.manual_seed(args.seed)
    pairs = [(torch.rand(20), torch.rand(1)) for _ in range(args.samples)]
    dataset = TensorDataset(torch.stack([x for x, _ in pairs]), torch.stack([y for _, y in pairs]))
    model = nn.Linear(20, 1).to(device)
    timed_training(args, model, dataset, make_optimizer(args, model.parameters()))
    save_final(model, args.out)
    dist.destroy_process_group()


def continue_run(args):
    """A researcher's way back from ddp-train to Python: the original module and optimizer, their state loaded."""
    dist.init_process_group("gloo")
    snapshot = torch.load(args.snapshot)
    model = MODELS[args.kind]()
    model.load_state_dict(snapshot["MODEL_STATE"])
    optimizer = make_optimizer(args, model.parameters())
    optimizer.load_state_dict(snapshot["OPTIMIZER_STATE"])
    torch.set_rng_state(snapshot["RNG_STATE"])
    train_ddp(args, model, load_data(args.data), optimizer, snapshot["EPOCHS_RUN"], snapshot["GLOBAL_STEP"])
    save_final(model, args.out)
    dist.destroy_process_group()


def run_script(args):
    scripted = torch.jit.load(args.path)
    eager = MODELS[args.kind]()
    eager.load_state_dict(torch.load(args.state))
    scripted.eval()
    eager.eval()
    x = torch.rand(5, *INPUTS[args.kind])
    print("same outputs" if torch.allclose(scripted(x), eager(x)) else "outputs differ")


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    model = sub.add_parser("make-model")
    model.add_argument("kind", choices=list(MODELS))
    model.add_argument("path")
    model.add_argument("--trace", action="store_true")
    model.add_argument("--width", type=int, default=32)
    data = sub.add_parser("make-data")
    data.add_argument("kind", choices=["mlp", "cnn", "regression"])
    data.add_argument("path")
    data.add_argument("--npy", action="store_true")
    data.add_argument("--samples", type=int, default=200)
    data.add_argument("--seed", type=int, default=5)
    data.add_argument("--classes", type=int, default=0)
    splitter = sub.add_parser("split")
    splitter.add_argument("data")
    splitter.add_argument("first", type=int)
    splitter.add_argument("pt")
    splitter.add_argument("dir")
    bad = sub.add_parser("make-bad-data")
    bad.add_argument("dir")
    script = sub.add_parser("run-script")
    script.add_argument("kind", choices=list(MODELS))
    script.add_argument("path")
    script.add_argument("state")
    for name in ("train", "continue", "train-seed"):
        command = sub.add_parser(name)
        if name == "train":
            command.add_argument("model")
        elif name == "train-seed":
            command.add_argument("--samples", type=int, default=2048)
        else:
            command.add_argument("kind", choices=list(MODELS))
            command.add_argument("snapshot")
        if name != "train-seed":
            command.add_argument("data")
        command.add_argument("out")
        command.add_argument("--epochs", type=int, default=3)
        command.add_argument("--batch-size", type=int, default=16)
        command.add_argument("--seed", type=int, default=0)
        command.add_argument("--optimizer", default="sgd")
        command.add_argument("--lr", type=float, default=1e-3)
        command.add_argument("--momentum", type=float, default=0.0)
        command.add_argument("--weight-decay", type=float, default=None)
        command.add_argument("--clip-grad-norm", type=float, default=0.0)
        command.add_argument("--lr-schedule", default="constant")
        command.add_argument("--lr-step-epochs", type=int, default=10)
        command.add_argument("--lr-gamma", type=float, default=0.1)
        command.add_argument("--warmup-steps", type=int, default=0)
        command.add_argument("--loss", default="cross-entropy")
        command.add_argument("--accumulate", type=int, default=1)
        command.add_argument("--backend", default="gloo", choices=["gloo", "nccl"])
    args = parser.parse_args()
    if args.command == "make-model":
        make_model(args.kind, args.path, args.trace, args.width)
    elif args.command == "make-data":
        make_data(args.kind, args.path, args.npy, args.samples, args.seed, args.classes)
    elif args.command == "split":
        split(args.data, args.first, args.pt, args.dir)
    elif args.command == "make-bad-data":
        make_bad_data(args.dir)
    elif args.command == "train":
        train(args)
    elif args.command == "train-seed":
        train_seed(args)
    elif args.command == "continue":
        continue_run(args)
    else:
        run_script(args)


if __name__ == "__main__":
    main()
