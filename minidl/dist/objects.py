"""Collectives on picklable Python objects (off the hot path: pickling is fine here).
Only unpickle data from ranks you trust, as with torch.distributed."""
from __future__ import annotations

import pickle

import numpy as np

from . import algorithms
from .descriptor import describe
from .state import resolve


def all_gather_object(object_list, obj, group=None) -> None:
    """object_list[i] = rank i's ``obj``."""
    what = "all_gather_object"
    g = resolve(group, what)
    if g is None:
        return
    if not isinstance(object_list, list) or len(object_list) != g.size:
        raise ValueError(f"{what}: object_list must be a list of {g.size} entries (the group size)")
    data = pickle.dumps(obj)

    def job(ch):
        object_list[:] = [pickle.loads(b) for b in algorithms.all_gather_bytes(ch, data)]
    g.submit(what, job, False, describe(what))


def broadcast_object_list(object_list, src=0, group=None, device=None) -> None:
    """Every rank's ``object_list`` gets the contents of rank ``src``'s (same length everywhere)."""
    what = "broadcast_object_list"
    g = resolve(group, what)
    if g is None:
        return
    root = g.group_rank(src, what, "src")
    if not isinstance(object_list, list):
        raise TypeError(f"{what}: object_list must be a list, got {type(object_list).__name__}")
    data = pickle.dumps(object_list) if g.rank == root else b""

    def job(ch):
        length = np.array([len(data)], np.int64)
        algorithms.broadcast(ch, length, root, g.config.algorithm)
        buf = np.frombuffer(data, np.uint8).copy() if g.rank == root else np.empty(int(length[0]), np.uint8)
        algorithms.broadcast(ch, buf, root, g.config.algorithm)
        received = pickle.loads(buf.tobytes())
        if len(received) != len(object_list):
            raise ValueError(f"{what}: object_list has {len(object_list)} entries here but {len(received)} on "
                             f"rank {src}")
        object_list[:] = received
    g.submit(what, job, False, describe(what, count=len(object_list), root=root), dict(numel=len(object_list)))
