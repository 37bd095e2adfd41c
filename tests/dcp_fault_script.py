"""One rank of a job that tests/test_dcp_faults.py breaks on purpose (MINIDL_FAULT) while it saves or loads a
distributed checkpoint: a process of the "gloo" backend (RANK, WORLD_SIZE; the ranks meet through the FileStore
named by MINIDL_TEST_STORE).

``python dcp_fault_script.py MODE ROOT``:

- ``same``: save checkpoint A (``state(rank, size, 1)``) to ROOT/A, then checkpoint B (version 2) to ROOT/A too.
- ``new``: save A to ROOT/A, then B to ROOT/B.
- ``load``: save A to ROOT/A, then load ROOT/A into zeroed tensors of A's shapes and check it against A.

Each rank prints ``SAVED A``, then ``SAVED B`` (or ``LOADED <ok>``), or ``ERROR <time.time()> <type> <failed ranks>
<message on one line>`` when B's save (or the load) raised; ``<failed ranks>`` is CheckpointException.failures'
ranks, ``-`` for any other error. It exits 0 after a success, 3 after an error.
"""
import os
import sys
import time

import numpy as np

import minidl
import minidl.dist as dist
import minidl.dist.checkpoint as dcp

ROWS, COLS, BIAS = 12, 40, 7   # fc.weight is split by rows across the ranks; fc.bias is replicated


def arrays(version: int) -> dict:
    """Checkpoint ``version``'s global values (numpy, seeded): what a load of it must give."""
    rng = np.random.default_rng([51, version])
    return {"model.fc.weight": rng.standard_normal((ROWS, COLS)).astype(np.float32),
            "model.fc.bias": rng.standard_normal(BIAS),
            "optim.step": 10 * version, "optim.lr": 0.5 / version}


def rows_of(rank: int, size: int) -> tuple:
    """The rows of fc.weight that ``rank`` holds: [start, stop)."""
    return rank * ROWS // size, (rank + 1) * ROWS // size


def state(rank: int, size: int, version: int, zeros: bool = False) -> dict:
    """Rank ``rank``'s state dict of checkpoint ``version`` (all zero, of the same shapes, with ``zeros``)."""
    a = arrays(version)
    lo, hi = rows_of(rank, size)
    weight, bias = a["model.fc.weight"][lo:hi], a["model.fc.bias"]
    if zeros:
        weight, bias = np.zeros_like(weight), np.zeros_like(bias)
    return {"model": {"fc.weight": dcp.LocalSlice(minidl.tensor(weight), (lo, 0), (ROWS, COLS)),
                      "fc.bias": minidl.tensor(bias)},
            "optim": {"step": 0 if zeros else a["optim.step"], "lr": 0.0 if zeros else a["optim.lr"]}}


def flat(st: dict) -> dict:
    """A state dict of ``state`` as ``arrays`` gives values (this rank's rows of fc.weight)."""
    return {"model.fc.weight": st["model"]["fc.weight"].tensor.numpy(), "model.fc.bias": st["model"]["fc.bias"].numpy(),
            "optim.step": st["optim"]["step"], "optim.lr": st["optim"]["lr"]}


def report(error: BaseException) -> None:
    failed = sorted(error.failures) if isinstance(error, dcp.CheckpointException) else "-"
    text = str(error).replace("\n", " | ")
    print("ERROR", time.time(), type(error).__name__, str(failed).replace(" ", ""), text, flush=True)
    sys.exit(3)


def main(mode: str, root: str) -> None:
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", init_method=f"file://{os.environ['MINIDL_TEST_STORE']}", rank=rank,
                            world_size=size, timeout=60)
    first = os.path.join(root, "A")
    dcp.save(state(rank, size, 1), checkpoint_id=first)
    print("SAVED A", flush=True)
    try:
        if mode == "load":
            got = state(rank, size, 1, zeros=True)
            dcp.load(got, checkpoint_id=first)
            want = flat(state(rank, size, 1))
            print("LOADED", all(np.array_equal(v, want[k]) for k, v in flat(got).items()), flush=True)
        else:
            dcp.save(state(rank, size, 2), checkpoint_id=first if mode == "same" else os.path.join(root, "B"))
            print("SAVED B", flush=True)
    except Exception as e:  # noqa: BLE001 -- reported for the test to read
        report(e)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
