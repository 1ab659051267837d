"""A PyTorch client written as for torchrun: it reads nothing but the env:// contract.

Started as `srun --ddp /usr/bin/python3 allreduce.py`, each rank all-reduces its rank over Gloo and checks
the sum, then prints one line the test checks.
"""
import os
import socket
import sys
from datetime import timedelta

import torch
import torch.distributed as dist


def main() -> int:
    dist.init_process_group("gloo", init_method="env://", timeout=timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    value = torch.tensor([float(rank + 1)])
    dist.all_reduce(value)
    expected = world * (world + 1) / 2
    ok = value.item() == expected
    print(f"allreduce rank={rank} world={world} local_rank={os.environ['LOCAL_RANK']} "
          f"host={socket.gethostname()} sum={value.item():g} expected={expected:g} {'OK' if ok else 'WRONG'}",
          flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
