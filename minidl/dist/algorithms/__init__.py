"""Our collective algorithms on point-to-point messages, one file per family, and the choice
among them. ``algorithm`` (init_process_group(algorithm=...) or MINIDL_DIST_ALGO) is one of:

- "auto": hierarchical all-reduce when ranks span several hosts with several ranks on some,
  else recursive doubling up to ``small_bytes`` and the ring above;
- "ring", "recursive_doubling", "hierarchical": that all-reduce, always;
- "native": the backend's own collective where it has one (MPI_Iallreduce ...), else "auto".

The other collectives have one algorithm each (tree broadcast/reduce, ring all-gather and
reduce-scatter, direct gather/scatter/all-to-all, dissemination barrier), or native.

init_process_group's ``small_message_bytes`` (default 64 KiB) is ``small_bytes`` here;
``segment_bytes`` (default ring.SEGMENT_BYTES) is the size of the segments the ring pipelines.
"""
from __future__ import annotations

import numpy as np

from . import direct, hierarchical, recursive_doubling, ring, tree

ALGORITHMS = ("auto", "ring", "recursive_doubling", "hierarchical", "native")


def _native(ch, name, algorithm):
    return algorithm == "native" and name in ch.comm.native


def all_reduce_path(comm, nbytes: int, config, hierarchy) -> str:
    """Which all-reduce a buffer of ``nbytes`` takes: "native", "hierarchical", "recursive_doubling"
    or "ring". ``config``: has ``.algorithm`` and ``.small_bytes``; ``hierarchy``: has ``.spans_hosts``."""
    algorithm = config.algorithm
    if algorithm == "native" and "all_reduce" in comm.native:
        return "native"
    if algorithm == "hierarchical" or (algorithm in ("auto", "native") and hierarchy.spans_hosts):
        return "hierarchical"
    if algorithm == "recursive_doubling" or (algorithm != "ring" and nbytes <= config.small_bytes):
        return "recursive_doubling"
    return "ring"


def all_reduce(ch, buf, op, path, config, hierarchy) -> None:
    """``path``: from all_reduce_path; ``config``: has ``.segment_bytes`` (the ring's pipelining
    segments); ``hierarchy``: has ``.channels(ch)`` -> (local, leaders or None)."""
    if path == "native":
        ch.native("all_reduce", buf, op.value)
    elif path == "hierarchical":
        hierarchical.all_reduce(*hierarchy.channels(ch), buf, op, config.segment_bytes)
    elif path == "recursive_doubling":
        recursive_doubling.all_reduce(ch, buf, op)
    else:
        ring.all_reduce(ch, buf, op, config.segment_bytes)


def native_or_ours(comm, name, algorithm) -> str:
    """The descriptor's path of a collective with one algorithm of our own."""
    return "native" if algorithm == "native" and name in comm.native else "ours"


def broadcast(ch, buf, root, algorithm) -> None:
    if _native(ch, "broadcast", algorithm):
        ch.native("broadcast", buf, root)
    else:
        tree.broadcast(ch, buf, root)


def reduce(ch, buf, op, root, algorithm) -> None:
    if _native(ch, "reduce", algorithm):
        ch.native("reduce", buf, op.value, root)
    else:
        tree.reduce(ch, buf, op, root)


def _rows(ch, blocks):
    m = blocks.shape[1]
    return [(i * m, (i + 1) * m) for i in range(ch.size)]


def all_gather(ch, blocks, algorithm, segment_bytes=ring.SEGMENT_BYTES) -> None:
    """``blocks``: (size, m) array, row ``rank`` filled in; afterwards every row is."""
    if _native(ch, "all_gather", algorithm):
        ch.native("all_gather", blocks)
    else:
        ring.all_gather(ch, blocks.reshape(-1), _rows(ch, blocks), segment_bytes)


def reduce_scatter(ch, blocks, op, segment_bytes) -> None:
    """``blocks``: (size, m) array; afterwards row ``rank`` holds the reduction of everyone's row."""
    ring.reduce_scatter(ch, blocks.reshape(-1), op, _rows(ch, blocks), segment_bytes)


def barrier(ch, algorithm) -> None:
    if _native(ch, "barrier", algorithm):
        ch.native("barrier")
    else:
        direct.barrier(ch)


gather, scatter, all_to_all = direct.gather, direct.scatter, direct.all_to_all


def all_gather_bytes(ch, data: bytes):
    """Every rank's ``data``, in rank order (lengths first, then the padded bytes: two all-gathers).
    For small control messages (host names, debug fingerprints, pickled objects)."""
    lengths = np.zeros((ch.size, 1), np.int64)
    lengths[ch.rank, 0] = len(data)
    all_gather(ch, lengths, "auto")
    width = int(lengths.max())
    blocks = np.zeros((ch.size, width), np.uint8)
    blocks[ch.rank, :len(data)] = np.frombuffer(data, np.uint8)
    all_gather(ch, blocks, "auto")
    return [blocks[i, :lengths[i, 0]].tobytes() for i in range(ch.size)]
