"""Distributed-checkpoint cases shared by the mpiexec and gloo scripts: every rank of the job saves, then loads
in another split, on all ranks and on rank 0 alone; failures come back as strings.

The spec: what every rank loads equals the numpy truth each rank computes itself (seeded), whatever split
the checkpoint was saved in; async_save's checkpoint equals save's.
"""
import shutil
import tempfile

import numpy as np

import minidl
import minidl.dist as dist
import minidl.dist.checkpoint as dcp
from minidl import nn
from minidl.dist.checkpoint.state_dict import get_state_dict, set_state_dict

ROWS, COLS = 600, 520   # a 1.2 MB float32 weight: its replica is written in pieces


def truth():
    rs = np.random.RandomState(7)
    return rs.randn(ROWS, COLS).astype(np.float32), rs.randn(ROWS, 16), rs.randint(0, 99, 10)


def rows_of(n, rank, total):
    per = -(-total // n)
    return min(rank * per, total), min((rank + 1) * per, total)


def saved_state(rank, size):
    w, r, ids = truth()
    lo, hi = rows_of(size, rank, ROWS)
    return {"model": {"w": dcp.LocalSlice(minidl.from_numpy(w[lo:hi].copy()), (lo, 0), w.shape),
                      "replica": minidl.from_numpy(w.copy()), "r": minidl.from_numpy(r.copy())},
            "ids": minidl.from_numpy(ids.copy()), "epoch": 3, "names": ["a", "b"]}


def check_load(folder, rank, size, group=None, no_dist=False):
    """Load with a column split (or whole, alone): the failures."""
    w, r, ids = truth()
    lo, hi = rows_of(size, rank, COLS)
    state = {"model": {"w": dcp.LocalSlice(minidl.zeros(ROWS, hi - lo), (0, lo), w.shape),
                       "replica": minidl.zeros(ROWS, COLS), "r": minidl.zeros(ROWS, 16, dtype=minidl.float64)},
             "ids": minidl.zeros(10, dtype=minidl.int64), "epoch": 0, "names": []}
    dcp.load(state, checkpoint_id=folder, process_group=group, no_dist=no_dist)
    got = state["model"]
    failures = []
    for name, have, want in (("w", got["w"].tensor.numpy(), w[:, lo:hi]), ("replica", got["replica"].numpy(), w),
                             ("r", got["r"].numpy(), r), ("ids", state["ids"].numpy(), ids)):
        if not np.array_equal(have, want):
            failures.append(f"{name} loaded on rank {rank} of {size} differs from the truth")
    if (state["epoch"], state["names"]) != (3, ["a", "b"]):
        failures.append(f"values loaded as {state['epoch']}, {state['names']}")
    return failures


def ddp_round_trip(folder, rank):
    """A DDP model's state saved by every rank loads into a plain model on rank 0 alone."""
    minidl.manual_seed(1)
    model = nn.Linear(8, 3)
    ddp = minidl.nn.parallel.DistributedDataParallel(model)
    optimizer = minidl.optim.Adam(ddp.parameters(), lr=0.1)
    ddp(minidl.ones(4, 8)).sum().backward()
    optimizer.step()
    model_sd, optim_sd = get_state_dict(ddp, optimizer)
    dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=folder)
    dist.barrier()
    if rank != 0:
        return []
    plain = nn.Linear(8, 3)
    fresh = minidl.optim.Adam(plain.parameters(), lr=0.5)
    model_sd, optim_sd = get_state_dict(plain, fresh)
    state = {"model": model_sd, "optim": optim_sd}
    dcp.load(state, checkpoint_id=folder, no_dist=True)
    set_state_dict(plain, fresh, model_state_dict=state["model"], optim_state_dict=state["optim"])
    failures = []
    if not np.array_equal(plain.weight.detach().numpy(), model.weight.detach().numpy()):
        failures.append("the DDP model's weight did not come back in a plain model")
    if fresh.param_groups[0]["lr"] != 0.1:
        failures.append(f"the optimizer's lr came back as {fresh.param_groups[0]['lr']}")
    return failures


def run_all(rank, size):
    holder = [tempfile.mkdtemp(prefix="minidl-dcp-cases-") if rank == 0 else None]
    dist.broadcast_object_list(holder, src=0)   # (one folder: the ranks share this host's file system)
    folder = holder[0]
    failures = []
    meta = dcp.save(saved_state(rank, size), checkpoint_id=f"{folder}/sync")
    if len(meta.state_dict_metadata["model.replica"].chunks) != min(size, ROWS):
        failures.append(f"the replica was written in {len(meta.state_dict_metadata['model.replica'].chunks)} pieces")
    failures += check_load(f"{folder}/sync", rank, size)
    future = dcp.async_save(saved_state(rank, size), checkpoint_id=f"{folder}/async")
    future.result()
    failures += check_load(f"{folder}/async", rank, size)
    alone = dist.new_group([0])
    if rank == 0:
        failures += check_load(f"{folder}/sync", 0, 1, group=alone)
        failures += check_load(f"{folder}/async", 0, 1, no_dist=True)
    failures += ddp_round_trip(f"{folder}/ddp", rank)
    dist.barrier()
    if rank == 0:
        shutil.rmtree(folder)
    return failures
