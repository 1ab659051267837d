"""The seed script's training in Python DDP, for comparison with ddp-train: same data, model, sampler, batch
size and optimizer, the same environment contract (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; Debian's
torchrun does not work on Python 3.11), and the same closing line "Trained ... samples/s".

usage: python_ddp.py [--workload seed|mlp] [--width N] [--samples N] [--batch-size N] total_epochs
       python_ddp.py --model FILE --data DIR [--batch-size N] total_epochs
                        the TorchScript module FILE on DIR/x.npy and DIR/y.npy, cross-entropy, as
                        ddp-train --model FILE --data DIR trains it
       python_ddp.py --save-model mlp|cnn FILE    a scripted MLP or small CNN for [1, 28, 28] inputs, 10 classes
       python_ddp.py --save-data DIR --samples N  N random [1, 28, 28] inputs and class indices as .npy
"""
import argparse
import os
import time

import numpy
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, TensorDataset
from torch.utils.data.distributed import DistributedSampler


class MyTrainDataset(Dataset):
    """datautils.MyTrainDataset of the seed guide."""

    def __init__(self, size):
        self.size = size
        self.data = [(torch.rand(20), torch.rand(1)) for _ in range(size)]

    def __len__(self):
        return self.size

    def __getitem__(self, index):
        return self.data[index]


def make_model(workload, width):
    if workload == "seed":
        return torch.nn.Linear(20, 1)
    return torch.nn.Sequential(torch.nn.Linear(20, width), torch.nn.ReLU(), torch.nn.Linear(width, width),
                               torch.nn.ReLU(), torch.nn.Linear(width, width), torch.nn.ReLU(),
                               torch.nn.Linear(width, 1))


def image_model(kind):
    """Models for FashionMNIST-shaped inputs, [1, 28, 28], and 10 classes."""
    if kind == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                             nn.Linear(1024, 10))
    return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(16, 32, 3, padding=1),
                         nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(32 * 7 * 7, 10))


def save_data(directory, samples):
    os.makedirs(directory, exist_ok=True)
    numpy.save(os.path.join(directory, "x.npy"), torch.rand(samples, 1, 28, 28).numpy())
    numpy.save(os.path.join(directory, "y.npy"), torch.randint(0, 10, (samples,)).numpy())


def workload(args):
    """The model, data set and loss of the run."""
    if args.model:
        # As ddp-train runs TorchScript: without the graph executor's optimisations.
        torch._C._set_graph_executor_optimize(False)
        x = torch.from_numpy(numpy.load(os.path.join(args.data, "x.npy")))
        y = torch.from_numpy(numpy.load(os.path.join(args.data, "y.npy")))
        return torch.jit.load(args.model), TensorDataset(x, y), torch.nn.functional.cross_entropy
    return make_model(args.workload, args.width), MyTrainDataset(args.samples), torch.nn.functional.mse_loss


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("total_epochs", type=int, nargs="?")
    parser.add_argument("--workload", default="seed", choices=["seed", "mlp"])
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--samples", type=int, default=2048)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--model")
    parser.add_argument("--data")
    parser.add_argument("--save-model", nargs=2, metavar=("KIND", "FILE"))
    parser.add_argument("--save-data")
    args = parser.parse_args()
    torch.manual_seed(0)
    if args.save_model:
        torch.jit.script(image_model(args.save_model[0])).save(args.save_model[1])
        return
    if args.save_data:
        save_data(args.save_data, args.samples)
        return

    dist.init_process_group("gloo")
    model, dataset, loss_function = workload(args)
    model = DDP(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    sampler = DistributedSampler(dataset)
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=False, sampler=sampler)

    samples = 0
    start = time.perf_counter()
    for epoch in range(args.total_epochs):
        sampler.set_epoch(epoch)
        for source, targets in loader:
            optimizer.zero_grad()
            loss = loss_function(model(source), targets)
            loss.backward()
            optimizer.step()
            samples += len(source) * dist.get_world_size()
    seconds = time.perf_counter() - start
    if dist.get_rank() == 0:
        print(f"Trained {args.total_epochs} epochs ({samples} samples) in {seconds:.3f} s: "
              f"{samples / seconds:.0f} samples/s", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
