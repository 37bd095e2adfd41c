"""load: the checkpoint into the state dict, in place, on any number of ranks.

The coordinator reads ``.metadata`` (an interrupted save and a missing checkpoint are named there) and
broadcasts it. Each rank then matches its state dict against it — every missing key, size or kind that
differs named in one error — and reads, of each file, only the blocks that hold the boxes it needs
(planner.py), each block checked against its CRC-32 as it is read. Tensors are filled in place (cast to
their own dtype and device, as ``copy_`` does); plain values are put back in the dicts they came from;
top-level objects with ``load_state_dict`` get their loaded state dict. A failure on any rank, at
either step, raises on every rank (coordination.py).
"""
from __future__ import annotations

import numpy as np

from ... import serialization
from ...autograd import no_grad
from .coordination import Ranks
from .filesystem import FileSystemReader
from .flatten import flatten, is_stateful, set_leaf
from .metadata import Metadata
from .planner import DefaultLoadPlanner
from .saver import _required

_WHAT = "minidl.dist.checkpoint.load"


def load(state_dict: dict, *, checkpoint_id=None, storage_reader=None, planner=None, process_group=None,
         no_dist: bool = False) -> None:
    """Fill ``state_dict`` in place from the checkpoint, whatever number of ranks and boxes it was saved
    with: each tensor (or ``LocalSlice``) gets the part of the checkpoint's tensor it covers."""
    ranks = Ranks(_WHAT, process_group, no_dist)
    reader = storage_reader or FileSystemReader(_required(checkpoint_id, _WHAT))
    reader.reset(checkpoint_id)
    planner = planner or DefaultLoadPlanner()
    meta = Metadata.from_json(ranks.from_coordinator(lambda: reader.read_metadata().to_json()), reader.path)
    stateful = {}

    def plan():   # (all that may fail on one rank before reading, inside the step: every rank hears of it)
        if not isinstance(state_dict, dict):
            raise TypeError(f"{_WHAT}: state_dict must be a dict, got {type(state_dict).__name__}")
        stateful.update((k, v) for k, v in state_dict.items() if is_stateful(v))
        working = {**state_dict, **{k: v.state_dict() for k, v in stateful.items()}}
        leaves, paths = flatten(working, _WHAT)
        return working, paths, planner.read_plan(leaves, meta, reader.path, _WHAT)
    with no_grad():   # (the boxes read into are views of parameters: views made without history)
        working, paths, (reads, values) = ranks.check(plan)
        ranks.check(_read, reader, meta, reads)
    for fqn, value in values.items():
        working = set_leaf(working, paths[fqn], value)
    for k, v in stateful.items():
        v.load_state_dict(working[k])
    for k in state_dict:
        if k not in stateful:
            state_dict[k] = working[k]


def _read(reader, meta: Metadata, reads: dict) -> None:
    """Each file's ranges in one go; each box assembled from its runs and copied into its target."""
    for name, wanted in reads.items():
        parts = iter(reader.read(meta, name, [r for read in wanted for r in read.ranges]))
        for read in wanted:
            pieces = [next(parts) for _ in read.ranges]
            raw = np.require(pieces[0] if len(pieces) == 1 else np.concatenate(pieces), requirements=["A"])
            stored = raw.view(read.dtype.np.newbyteorder("<"))
            box = np.lib.stride_tricks.as_strided(stored, read.sizes, [n * stored.itemsize for n in read.strides])
            values = np.ascontiguousarray(box, dtype=read.dtype.np)   # (copied only where not yet row-major)
            read.target.copy_(serialization._whole(read.dtype, read.sizes, values.reshape(-1)))
