"""Rendezvous time of PyTorch's own init_process_group (env://, Gloo) under srun --ddp, for bench/scale_bench.sh.

Every rank notes when it enters init_process_group and when it leaves it; rank 0 prints the time from the last rank
entering to the last rank leaving: the rendezvous itself (TCPStore and Gloo's full mesh), without the time the ranks
took to start and import torch, which differs from rank to rank. The test cluster's nodes share one clock.
"""
import time
from datetime import timedelta

import torch
import torch.distributed as dist


def main():
    entered = time.time()
    dist.init_process_group("gloo", init_method="env://", timeout=timedelta(seconds=600))
    left = time.time()
    times = torch.tensor([entered, left], dtype=torch.float64)
    dist.all_reduce(times, op=dist.ReduceOp.MAX)
    if dist.get_rank() == 0:
        print(f"rendezvous world={dist.get_world_size()} seconds={times[1].item() - times[0].item():.3f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
