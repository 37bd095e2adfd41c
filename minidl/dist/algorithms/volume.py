"""How many bytes one rank sends in each collective, exactly as debug.sent_bytes counts them, so that a planner can
predict a parallel plan's traffic per rank from the list of collectives it calls. What each algorithm sends is
said next to it (ring.sent_elements, recursive_doubling.sends, tree.broadcast_sends ...); this module follows
collectives.py: the all-reduce path all_reduce_path picks, and the buffers the reductions run on (bfloat16's in
float32). Segmenting never changes a count (segments cover their blocks exactly), so segment_bytes is no input.

Not counted, as debug.sent_bytes does not count them: the agreement's control messages, a native collective's, the
MINIDL_DIST_DEBUG fingerprints' (whose length depends on the call site: predictions hold with debugging off). A
point-to-point send counts its tensor's bytes.
"""
from __future__ import annotations

import types

from . import ALGORITHMS, agree, all_reduce_path, hierarchical, recursive_doubling, ring, tree
from ..group import Config, Hierarchy

REDUCING = ("all_reduce", "reduce", "reduce_scatter", "reduce_scatter_tensor")
ROOTED = ("broadcast", "reduce")
COLLECTIVES = ("all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter",
               "reduce_scatter_tensor", "barrier", "send")


def sent_bytes(collective: str, numel: int, dtype_itemsize: int, group_size: int, rank: int, *, root=None,
               small_bytes: int = Config.small_bytes, algorithm: str = "auto", widened_itemsize=None,
               hosts=None) -> int:
    """Bytes group rank ``rank`` of ``group_size`` sends in ``collective`` on ``numel`` elements of ``dtype_itemsize``
    bytes: the tensor's (all_reduce, broadcast, reduce, send), one rank's block (all_gather's input, reduce_scatter's
    output). ``root``: the group rank of broadcast's source or reduce's destination. ``small_bytes``, ``algorithm``:
    the group's (init_process_group's small_message_bytes and algorithm). ``widened_itemsize``: the itemsize the
    reducing collectives reduce in where it differs, 4 for bfloat16. ``hosts``: a host name per rank, for the
    hierarchical all-reduce ("auto" takes it when the ranks span hosts with several on some); None: one host."""
    _check(collective, numel, dtype_itemsize, group_size, rank, root, algorithm, widened_itemsize, hosts)
    n, r = group_size, rank
    itemsize = (widened_itemsize or dtype_itemsize) if collective in REDUCING else dtype_itemsize
    if collective == "all_reduce":
        elements = _all_reduce(numel, numel * itemsize, n, r, small_bytes, algorithm, hosts)
    elif collective == "broadcast":
        elements = numel * tree.broadcast_sends(n, r, root)
    elif collective == "reduce":
        elements = numel * tree.reduce_sends(n, r, root)
    elif collective == "send":
        elements = numel
    elif collective == "barrier":
        elements = 0  # (its messages are empty)
    else:  # the ring's all-gather or reduce-scatter over one block per rank
        elements = ring.phase_sent_elements(numel, n)
    return elements * itemsize


def scratch_bytes(collective: str, numel: int, itemsize: int, group_size: int, *,
                  small_bytes: int = Config.small_bytes, segment_bytes: int = Config.segment_bytes,
                  algorithm: str = "auto") -> int:
    """Bytes of the receive scratch ``collective`` asks the group's communicator for (kept between collectives, as
    large as the largest asked for: memory a plan holds), on one host: the agreement's before it (headers and a
    small all-reduce's room), and a ring reduce-scatter's slots or a large recursive-doubling all-reduce's whole
    buffer. ``itemsize``: the reduced buffer's (4 for bfloat16)."""
    _check(collective, numel, itemsize, group_size, 0, 0, algorithm, None, None)
    n, agreement = group_size, agree.scratch_bytes(small_bytes)
    if n == 1 or collective not in REDUCING or collective == "reduce":
        return agreement
    if collective != "all_reduce":
        return max(agreement, ring.reduce_scratch_elements(numel, itemsize, segment_bytes) * itemsize)
    path = _path(numel * itemsize, n, small_bytes, algorithm, None)
    if path == "recursive_doubling":
        return max(agreement, 0 if numel * itemsize <= small_bytes else numel * itemsize)
    return max(agreement, ring.reduce_scratch_elements(-(-numel // n), itemsize, segment_bytes) * itemsize)


def _path(nbytes, n, small_bytes, algorithm, hosts) -> str:
    """The all-reduce path all_reduce_path takes (hosts: a name per rank, None: one host)."""
    hosts = ["?"] * n if hosts is None else list(hosts)
    config = types.SimpleNamespace(algorithm=algorithm, small_bytes=small_bytes)
    return all_reduce_path(types.SimpleNamespace(native=()), nbytes, config, Hierarchy(None, hosts))


def _all_reduce(numel, nbytes, n, r, small_bytes, algorithm, hosts) -> int:
    """Elements sent, on the path collectives._all_reduce takes (a small recursive-doubling one, riding in the
    agreement, sends as many as the algorithm would)."""
    hosts = ["?"] * n if hosts is None else list(hosts)
    path = _path(nbytes, n, small_bytes, algorithm, hosts)
    if path == "hierarchical":
        return hierarchical.sent_elements(numel, hosts, r)
    if path == "recursive_doubling":
        return numel * recursive_doubling.sends(n, r)
    return ring.sent_elements(numel, n, r)


def _check(collective, numel, dtype_itemsize, group_size, rank, root, algorithm, widened_itemsize, hosts) -> None:
    what = f"sent_bytes({collective!r})"
    if collective not in COLLECTIVES:
        raise ValueError(f"sent_bytes: unknown collective {collective!r}; one of {COLLECTIVES}")
    if algorithm == "native":
        raise ValueError(f"{what}: a native collective sends what its library sends, which minidl does not count")
    if algorithm not in ALGORITHMS:
        raise ValueError(f"{what}: unknown algorithm {algorithm!r}; one of {ALGORITHMS}")
    if group_size < 1 or not 0 <= rank < group_size:
        raise ValueError(f"{what}: rank {rank} is not a rank of a group of {group_size}")
    if numel < 0 or dtype_itemsize < 1 or (widened_itemsize is not None and widened_itemsize < 1):
        raise ValueError(f"{what}: numel={numel}, dtype_itemsize={dtype_itemsize}, widened_itemsize="
                         f"{widened_itemsize}: expected numel >= 0 and itemsizes >= 1")
    if collective in ROOTED and (root is None or not 0 <= root < group_size):
        raise ValueError(f"{what}: root={root} must be a rank of the group of {group_size}")
    if hosts is not None and len(hosts) != group_size:
        raise ValueError(f"{what}: {len(hosts)} host names for a group of {group_size}")
