"""Python's side of the snapshot format tests, with Debian's python3-torch.

  snapshot_io.py read PATH               prints what torch.load finds in a ddp-train snapshot
  snapshot_io.py write-seed PATH EPOCHS  writes a snapshot the way the seed script does
"""
import sys

import torch


def read(path):
    snapshot = torch.load(path)
    print("type", type(snapshot).__name__)
    print("keys", " ".join(sorted(snapshot)))
    print("EPOCHS_RUN", snapshot["EPOCHS_RUN"])
    print("GLOBAL_STEP", snapshot["GLOBAL_STEP"])
    print("weight_sum", float(snapshot["MODEL_STATE"]["weight"].sum()))
    print("sampler", snapshot["SAMPLER"]["batches_done"], snapshot["SAMPLER"]["world_size"])
    print("momentum_sum", float(snapshot["OPTIMIZER_STATE"]["state"][0]["momentum_buffer"].sum()))
    model = torch.nn.Linear(5, 4)
    model.load_state_dict(snapshot["MODEL_STATE"])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    optimizer.load_state_dict(snapshot["OPTIMIZER_STATE"])
    torch.set_rng_state(snapshot["RNG_STATE"])
    print("loaded into Linear, SGD and the RNG")


def write_seed(path, epochs):
    torch.manual_seed(1234)
    model = torch.nn.Linear(20, 1)
    torch.save({"MODEL_STATE": dict(model.state_dict()), "EPOCHS_RUN": epochs}, path)


if __name__ == "__main__":
    if sys.argv[1] == "read":
        read(sys.argv[2])
    else:
        write_seed(sys.argv[2], int(sys.argv[3]))
