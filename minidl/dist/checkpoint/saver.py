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
    ``LocalSlice`` is a rank's box of a tensor split across ranks. ``no_dist=True``: this process alone.
    Waits for this process's unfinished ``async_save`` first (saves into one folder must not overlap)."""
    ranks = Ranks(_WHAT, process_group, no_dist)
    _wait_for_pending(ranks)
    planner = planner or DefaultSavePlanner()
    writer, meta, boxes_of, writes = _plan(state_dict, ranks, checkpoint_id, storage_writer, planner, use_collectives)

    def write():   # (staging too may fail: a device copy; inside the step, so every rank hears of it)
        return writer.write_data(planner.pieces(boxes_of, writes, False), meta.save_id, ranks.global_rank)
    return _commit(ranks, writer, meta, ranks.all_gather(write))


def async_save(state_dict: dict, *, checkpoint_id=None, storage_writer=None, planner=None, process_group=None,
               async_checkpointer_type=AsyncCheckpointerType.THREAD, async_stager=None, no_dist: bool = False,
               use_collectives: bool = True) -> concurrent.futures.Future:
    """``save``, returning once this rank's share is copied to host memory: the state dict may change after
    that. The files are written and committed on a thread; the Future gives the Metadata, or raises what
    ``save`` would have (a CheckpointException). A new save or async_save waits for this one first; so does
    the end of the process (the thread is not a daemon)."""
    if AsyncCheckpointerType(async_checkpointer_type) is not AsyncCheckpointerType.THREAD or async_stager is not None:
        raise NotImplementedError("async_save: minidl writes checkpoints on a thread (AsyncCheckpointerType.THREAD) "
                                  "and stages by copying this rank's share to host memory; process checkpointers "
                                  "and custom stagers are not built")
    ranks = Ranks("minidl.dist.checkpoint.async_save", process_group, no_dist)
    _wait_for_pending(ranks)
    side = _side(ranks)
    planner = planner or DefaultSavePlanner()
    future = concurrent.futures.Future()
    try:
        writer, meta, boxes_of, writes = _plan(state_dict, ranks, checkpoint_id, storage_writer, planner,
                                               use_collectives)
        pieces = ranks.check(planner.pieces, boxes_of, writes, True)
    except CheckpointException as e:   # reached by every rank alike: the future says it
        future.set_exception(e)
        return future

    def run():
        try:
            future.set_result(_commit(side, writer, meta, side.all_gather(writer.write_data, pieces, meta.save_id,
                                                                          side.global_rank)))
        except BaseException as e:  # noqa: BLE001 -- handed to whoever waits on the future
            future.set_exception(e)
    _pending[_key(ranks)] = future
    threading.Thread(target=run, name=f"minidl async_save rank {ranks.rank}").start()
    return future


_pending = weakref.WeakKeyDictionary()       # group (or _ALONE) -> its last async_save's future
_side_groups = weakref.WeakKeyDictionary()   # group -> the group async saves talk over


class _Alone:
    """The key of no_dist's async saves in ``_pending``."""


_ALONE = _Alone()


def _key(ranks: Ranks):
    return _ALONE if ranks.group is None else ranks.group


def _wait_for_pending(ranks: Ranks) -> None:
    previous = _pending.get(_key(ranks))
    if previous is not None:
        concurrent.futures.wait([previous])


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


def _plan(state_dict, ranks: Ranks, checkpoint_id, storage_writer, planner, use_collectives: bool):
    """(writer, Metadata without storage, this rank's boxes, every rank's writes): step 1, one all-gather.
    Everything a rank may fail at before it (the state_dict() calls, flattening) runs inside it."""
    if not use_collectives and ranks.size > 1:
        raise ValueError(f"{ranks.what}: use_collectives=False is not supported on {ranks.size} ranks: minidl's "
                         f"atomic commit needs the coordinator to gather every rank's files first")
    writer = storage_writer or FileSystemWriter(_required(checkpoint_id, ranks.what))
    writer.reset(checkpoint_id)
    mine = {}

    def local():
        if not isinstance(state_dict, dict):
            raise TypeError(f"{ranks.what}: state_dict must be a dict, got {type(state_dict).__name__}")
        states = {k: v.state_dict() if is_stateful(v) else v for k, v in state_dict.items()}
        entries, mine["boxes"] = planner.local_plan(*flatten(states, ranks.what), ranks.what)
        return writer.set_up(ranks.is_coordinator), entries
    found = ranks.all_gather(local)
    writes, meta = ranks.everywhere(planner.global_plan, [entries for _, entries in found], ranks.what)
    meta.save_id = found[0][0]
    return writer, meta, mine["boxes"], writes[ranks.rank]


def _commit(ranks: Ranks, writer, meta, written: list):
    """Step 3: every rank's files into the metadata; the coordinator commits; its outcome reaches all."""
    for files in written:   # in rank order: where several ranks wrote a box, the lowest's copy is named
        for name, record, placed in files:
            meta.files[name] = record
            for fqn, offsets, offset, length in placed:
                meta.storage_data.setdefault(MetadataIndex(fqn, tuple(offsets)), StorageInfo(name, offset, length))
    ranks.from_coordinator(writer.finish, meta, ranks.global_rank)
    return meta


def _required(checkpoint_id, what: str):
    if checkpoint_id is None:
        raise RuntimeError(f"{what}: give checkpoint_id (a folder) or a storage_writer/storage_reader")
    return checkpoint_id
