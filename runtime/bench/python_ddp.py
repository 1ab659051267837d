"""The seed script's training in Python DDP, for comparison with ddp-train: same data, model, sampler, batch
size and optimizer, the same environment contract (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; Debian's
torchrun does not work on Python 3.11), and the same closing line "Trained ... samples/s".

usage: python_ddp.py [--workload seed|mlp] [--width N] [--samples N] [--batch-size N] total_epochs
"""
import argparse
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
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


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("total_epochs", type=int)
    parser.add_argument("--workload", default="seed", choices=["seed", "mlp"])
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--samples", type=int, default=2048)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    dataset = MyTrainDataset(args.samples)
    model = DDP(make_model(args.workload, args.width))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    sampler = DistributedSampler(dataset)
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=False, sampler=sampler)

    samples = 0
    start = time.perf_counter()
    for epoch in range(args.total_epochs):
        sampler.set_epoch(epoch)
        for source, targets in loader:
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(source), targets)
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
