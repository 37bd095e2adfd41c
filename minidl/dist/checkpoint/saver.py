"""save and async_save: plan together, write apart, commit once.

1. Plan: every rank lists its boxes; one all-gather gives every rank every list, and each computes the same
   plan from them (planner.py). The coordinator (rank 0 of the group) also makes the folder and picks the
   save id here, so its failures reach every rank at this first step.
2. Write: each rank writes its share into files of its own, in parallel with the others (filesystem.py).
3. Commit: one all-gather brings every rank's files and checksums to all; the coordinator writes
   ``.metadata``, and its success or error is broadcast, so ``save`` returns on every rank only once the
   checkpoint is committed — or raises on every rank.

``async_save`` does step 1 and copies this rank's share to host memory before it returns; steps 2 and 3
run on a thread, talking over a process group of their own (split off the caller's once), so they never
interleave with the collectives training goes on with.
"""
from __future__ import annotations

import concurrent.futures
import copy
import enum
import threading
import weakref

from .. import state
from ..group import ProcessGroup
from .coordination import CheckpointException, Ranks
from .filesystem import FileSystemWriter
from .flatten import flatten, is_stateful
from .metadata import MetadataIndex, StorageInfo
from .planner import DefaultSavePlanner

_WHAT = "minidl.dist.checkpoint.save"


class AsyncCheckpointerType(enum.Enum):
    THREAD = "thread"
    PROCESS = "process"


def save(state_dict: dict, *, checkpoint_id=None, storage_writer=None, planner=None, process_group=None,
         no_dist: bool = False, use_collectives: bool = True):
    """Save ``state_dict`` — each rank's own, in SPMD style — as one checkpoint; returns its Metadata.
    Top-level values with ``state_dict()``/``load_state_dict()`` (a module, an optimizer) are saved through
    ``state_dict()``. Tensors held by several ranks under one key are replicas, written once; a
    ``LocalSlice`` is a rank's box of a tensor split across ranks. ``no_dist=True``: this process alone."""
    ranks = Ranks(_WHAT, process_group, no_dist)
    writer, save_id, meta, pieces = _plan(state_dict, ranks, checkpoint_id, storage_writer, planner,
                                                  use_collectives, copy_out=False)
    return _write_and_commit(ranks, writer, save_id, meta, pieces)


def async_save(state_dict: dict, *, checkpoint_id=None, storage_writer=None, planner=None, process_group=None,
               async_checkpointer_type=AsyncCheckpointerType.THREAD, async_stager=None, no_dist: bool = False,
               use_collectives: bool = True) -> concurrent.futures.Future:
    """``save``, returning once this rank's share is copied to host memory: the state dict may change after
    that. The files are written and committed on a thread; the Future gives the Metadata, or raises what
    ``save`` would have. A new async_save waits for this process's previous one first."""
    if AsyncCheckpointerType(async_checkpointer_type) is not AsyncCheckpointerType.THREAD or async_stager is not None:
        raise NotImplementedError("async_save: minidl writes checkpoints on a thread (AsyncCheckpointerType.THREAD) "
                                  "and stages by copying this rank's share to host memory; process checkpointers "
                                  "and custom stagers are not built")
    ranks = Ranks("minidl.dist.checkpoint.async_save", process_group, no_dist)
    key = None if ranks.group is None else ranks.group
    previous = _pending.get(key)
    if previous is not None:
        concurrent.futures.wait([previous])
    side = _side(ranks)
    future = concurrent.futures.Future()
    try:
        writer, save_id, meta, pieces = _plan(state_dict, ranks, checkpoint_id, storage_writer, planner,
                                              use_collectives, copy_out=True)
    except (CheckpointException, ValueError) as e:   # reached by every rank alike: the future says it
        future.set_exception(e)
        return future

    def run():
        try:
            future.set_result(_write_and_commit(side, writer, save_id, meta, pieces))
        except BaseException as e:  # noqa: BLE001 -- handed to whoever waits on the future
            future.set_exception(e)
    _pending[key] = future
    threading.Thread(target=run, name=f"minidl async_save rank {ranks.rank}", daemon=True).start()
    return future


_pending: dict = {}                           # group (None: no_dist) -> its last async_save's future
_side_groups = weakref.WeakKeyDictionary()   # group -> the group async saves talk over


def _side(ranks: Ranks) -> Ranks:
    """Ranks like ``ranks`` but over a process group of their own, made (collectively) at the first use."""
    side = copy.copy(ranks)
    if ranks.group is not None:
        g = ranks.group
        if g not in _side_groups:
            _side_groups[g] = ProcessGroup(g.p2p.split(0, g.rank), g.ranks, g.config)
            state._state().setdefault("subgroups", []).append(_side_groups[g])   # closed with the others
        side.group = _side_groups[g]
    return side


def _plan(state_dict, ranks: Ranks, checkpoint_id, storage_writer, planner, use_collectives: bool, copy_out: bool):
    if not use_collectives and ranks.size > 1:
        raise ValueError(f"{ranks.what}: use_collectives=False is not supported on {ranks.size} ranks: minidl's "
                         f"atomic commit needs the coordinator to gather every rank's files first")
    writer = storage_writer or FileSystemWriter(_required(checkpoint_id, ranks.what))
    writer.reset(checkpoint_id)
    planner = planner or DefaultSavePlanner()
    states = {k: v.state_dict() if is_stateful(v) else v for k, v in state_dict.items()} \
        if isinstance(state_dict, dict) else state_dict
    leaves, paths = flatten(states, ranks.what)

    def local():
        return writer.set_up(ranks.is_coordinator), planner.local_plan(leaves, paths, ranks.what)
    found = ranks.all_gather(local)
    writes, meta = planner.global_plan([plan for _, plan in found], ranks.what)
    meta.save_id = found[0][0]
    return writer, meta.save_id, meta, planner.pieces(writes[ranks.rank], copy_out)


def _write_and_commit(ranks: Ranks, writer, save_id: str, meta, pieces: list):
    written = ranks.all_gather(writer.write_data, pieces, save_id, ranks.global_rank)
    for files in written:   # in rank order: where several ranks wrote a box, the lowest's copy is named
        for name, record, placed in files:
            meta.files[name] = record
            for fqn, offsets, offset, length in placed:
                meta.storage_data.setdefault(MetadataIndex(fqn, tuple(offsets)), StorageInfo(name, offset, length))
    ranks.from_coordinator(writer.finish, meta, ranks.global_rank)
    return meta


def _required(checkpoint_id, what: str):
    if checkpoint_id is None:
        raise ValueError(f"{what}: give checkpoint_id (a folder) or a storage_writer/storage_reader")
    return checkpoint_id
