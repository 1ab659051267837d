"""Fault injection for step_failure.sh, run by every task of an `srun --ddp` step.

Rank FAIL_RANK fails as FAIL_HOW says (raise: a ValueError; kill: SIGKILL to itself); the other ranks sleep SLEEP
seconds, then leave a file done-<rank> in MARKERS. main is decorated with PyTorch's @record, so a raised exception
goes to TORCHELASTIC_ERROR_FILE as it does under torchrun.
"""
import os
import signal
import sys
import time

from torch.distributed.elastic.multiprocessing.errors import record


def fail(rank, how):
    step = f"{os.environ['SLURM_JOB_ID']}.{os.environ['SLURM_STEP_ID']}"
    print(f"rank {rank} is about to fail ({how}) in step {step}", file=sys.stderr, flush=True)
    if how == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    raise ValueError(f"bad batch 7 on rank {rank}")


@record
def main():
    rank = int(os.environ["RANK"])
    if rank == int(os.environ["FAIL_RANK"]):
        fail(rank, os.environ.get("FAIL_HOW", "raise"))
    time.sleep(float(os.environ.get("SLEEP", "300")))
    with open(os.path.join(os.environ["MARKERS"], f"done-{rank}"), "w"):
        pass


if __name__ == "__main__":
    main()
