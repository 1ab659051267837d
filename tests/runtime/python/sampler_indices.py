"""Prints torch.utils.data.distributed.DistributedSampler's indices, one line per configuration.

usage: sampler_indices.py size,replicas,rank,seed,epoch,shuffle,drop_last ...
"""
import sys

from torch.utils.data.distributed import DistributedSampler


def main():
    for spec in sys.argv[1:]:
        size, replicas, rank, seed, epoch, shuffle, drop_last = (int(v) for v in spec.split(","))
        sampler = DistributedSampler(range(size), num_replicas=replicas, rank=rank, shuffle=bool(shuffle),
                                     seed=seed, drop_last=bool(drop_last))
        sampler.set_epoch(epoch)
        print(" ".join(str(i) for i in sampler))


if __name__ == "__main__":
    main()
