"""Python's side of the snapshot format tests, with Debian's python3-torch.

  snapshot_io.py read PATH               prints what torch.load finds in a ddp-train snapshot
  snapshot_io.py seed-resume PATH        the seed script's _load_snapshot on PATH
  snapshot_io.py write-seed PATH EPOCHS  writes a snapshot the way the seed script does
  snapshot_io.py write-zoo PATH          torch.save of every kind of value a state dict or data file holds
  snapshot_io.py write-set PATH          torch.save of a Python set, which weights_only refuses too
"""
import collections
import sys

import torch


def load_with_defaults(path):
    """torch.load(path) as users call it; from PyTorch 2 on, also with weights_only=True (PyTorch 2.6's default;
    1.13's weights_only unpickler cannot read floats at all, in any file)."""
    snapshot = torch.load(path)
    if int(torch.__version__.split(".")[0]) >= 2:
        snapshot = torch.load(path, weights_only=True)
        print("weights_only=True read it")
    return snapshot


def read(path):
    snapshot = load_with_defaults(path)
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


def seed_resume(path):
    """multigpu_torchrun.py's Trainer._load_snapshot, on the CPU."""
    model = torch.nn.Linear(20, 1)
    snapshot = torch.load(path, map_location="cpu")
    model.load_state_dict(snapshot["MODEL_STATE"])
    epochs_run = snapshot["EPOCHS_RUN"]
    print(f"Resuming training from snapshot at Epoch {epochs_run}")
    print(f"weight_sum {float(model.weight.sum()):.4f}")


def write_seed(path, epochs):
    """multigpu_torchrun.py's Trainer._save_snapshot: the state_dict is an OrderedDict."""
    torch.manual_seed(1234)
    model = torch.nn.Linear(20, 1)
    torch.save({"MODEL_STATE": model.state_dict(), "EPOCHS_RUN": epochs}, path)


def write_zoo(path):
    base = torch.arange(12, dtype=torch.float32)
    torch.save({
        "ordered": collections.OrderedDict([("b", 1), ("a", 2)]),
        "ints": [0, 255, 65535, -1, 2**31 - 1, -2**31, 2**40, -2**40, 2**63 - 1, -2**63],
        "floats": (1.5, -0.0, 1e300),
        "flags": [True, False, None],
        "text": "h\u00e9llo",
        "nested": {"t": (1, (2, [3])), 7: "int key"},
        "transposed": base.reshape(3, 4).t(),
        "view_a": base[2:5],
        "view_b": base[4:],
        "half": torch.tensor([1.0, -2.5], dtype=torch.float16),
        "bytes": torch.tensor([1, 200], dtype=torch.uint8),
        "mask": torch.tensor([True, False]),
        "long": torch.tensor([-3, 2**40]),
        "empty": torch.empty(0, 3),
        "scalar": torch.tensor(4.25, dtype=torch.float64),
        "parameter": torch.nn.Parameter(torch.ones(2)),
        "state_dict": torch.nn.Linear(2, 3).state_dict(),
    }, path)


if __name__ == "__main__":
    if sys.argv[1] == "write-zoo":
        write_zoo(sys.argv[2])
    elif sys.argv[1] == "write-set":
        torch.save({"a": {1, 2}}, sys.argv[2])
    elif sys.argv[1] == "read":
        read(sys.argv[2])
    elif sys.argv[1] == "seed-resume":
        seed_resume(sys.argv[2])
    else:
        write_seed(sys.argv[2], int(sys.argv[3]))
