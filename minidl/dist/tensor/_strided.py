"""The rows each rank holds where a _StridedShard is among the placements, and the redistributions from and to them.

A tensor dimension that several mesh dimensions split is split in some order. Shards split it in mesh-dimension
order; a ``_StridedShard(dim, f)`` on mesh dimension d says that later mesh dimensions, whose sizes multiply to f,
split it before d. torch decodes that order from the split factors (right to left, each mesh dimension placed
after those whose sizes multiply to its factor) and splits by chunk's rule in it: (_S(0, tp), S(0)) on a
("dp", "tp") mesh is rank (dp, tp) holding piece dp of chunk tp, FSDP2's rows of a tensor-parallel piece. Where no
order gives the factors (a _StridedShard alone on a 1-D mesh), the placements split left to right, a _StridedShard
keeping its piece of each of its f chunks (``_StridedShard._split``). torch's compute_local_shape_and_global_offset
reads every placement left to right; the two readings agree on even sizes, but on some uneven ones (9 rows on a
(4, 2) mesh; 6 on a (2, 2, 2) mesh under (_S(0, 4), S(0), S(0))) torch's boxes contradict the pieces its own
redistribution makes: minidl follows the pieces. A rank's rows are ascending: its piece is its rows in order.

Every rank's rows are arithmetic on the mesh's coordinates, known to every rank, so a redistribution is planned on
them: all-gathers, each of the mesh dimension that split its tensor dimension last, until every rank's new rows are
among those it holds; then one local selection. Each gather is checked for every rank (its new rows must be among
those its group holds), so a plan never misplaces a row.
"""
from __future__ import annotations

import functools
import itertools

import numpy as np

from .placement_types import Replicate, _chunk, _is_shard_like, _StridedShard


def strided(placements) -> bool:
    return any(isinstance(p, _StridedShard) for p in placements)


def _order(placements, sizes, dim):
    """The mesh dimensions that split tensor dimension ``dim``, in the order they split it (torch's decoding of the
    split factors); None where no order gives them."""
    order = []
    for d in reversed(range(len(placements))):
        p = placements[d]
        if not (_is_shard_like(p) and p.dim == dim):
            continue
        factor, product = (p.split_factor if isinstance(p, _StridedShard) else 1), 1
        for i in range(len(order) + 1):
            if product == factor:
                order.insert(i, d)
                break
            if i < len(order):
                product *= sizes[order[i]]
        else:
            return None
    return order


def held(n: int, dim: int, placements: tuple, sizes: tuple, coordinate: tuple):
    """The rows of tensor dimension ``dim`` (``n`` long) that the rank at ``coordinate`` holds: an index array."""
    rows, order = np.arange(n), _order(placements, sizes, dim)
    if order is not None:
        for d in order:
            rows = _chunk(rows, sizes[d], coordinate[d])
    else:
        for d, p in enumerate(placements):
            if _is_shard_like(p) and p.dim == dim:
                rows = (p._split if isinstance(p, _StridedShard) else _chunk)(rows, sizes[d], coordinate[d])
    return rows


def box(shape, placements, sizes, coordinate) -> tuple:
    """(shape, offsets) of the rank's piece, as torch's: its rows' count and first row (the length where none)."""
    rows = [held(n, i, placements, sizes, coordinate) for i, n in enumerate(shape)]
    return tuple(len(r) for r in rows), tuple(int(r[0]) if len(r) else n for r, n in zip(rows, shape))


def runs(rows) -> list:
    """(first row, position in the piece, length) of each run of consecutive rows of ``rows``."""
    breaks = np.flatnonzero(np.diff(rows) != 1) + 1
    starts, ends = [0, *breaks.tolist()], [*breaks.tolist(), len(rows)]
    return [(int(rows[s]), s, e - s) for s, e in zip(starts, ends)]


def boxes(shape, placements, sizes, coordinate) -> list:
    """[(global offsets, offsets in the piece, sizes)]: the boxes of the global tensor the rank's piece is made of,
    one per combination of runs of its rows (one box, maybe empty, where it holds no element)."""
    rows = [held(n, i, placements, sizes, coordinate) for i, n in enumerate(shape)]
    if any(len(r) == 0 for r in rows):
        size, offsets = box(shape, placements, sizes, coordinate)
        return [(offsets, (0,) * len(shape), size)]
    return [tuple(zip(*combination)) for combination in itertools.product(*(runs(r) for r in rows))]


# -- redistribution ----------------------------------------------------------------------------------
def gathered_positions(n, dim, before, after, sizes, coordinate, d) -> tuple:
    """(width, positions) of an all-gather over mesh dimension ``d`` from placements ``before`` to ``after``: each
    rank's rows of ``dim`` padded to ``width``, and the positions in the joined blocks of this rank's rows under
    ``after`` (-1 for a row no rank of the group holds)."""
    members = [held(n, dim, before, sizes, coordinate[:d] + (r,) + coordinate[d + 1:]) for r in range(sizes[d])]
    width = max(len(m) for m in members)
    where = np.full(n, -1)
    for r, m in enumerate(members):
        where[m] = r * width + np.arange(len(m))
    return width, where[held(n, dim, after, sizes, coordinate)]


def selected_positions(n, dim, before, after, sizes, coordinate):
    """The positions in the rank's piece under ``before`` of its rows under ``after`` (-1 for one it lacks)."""
    have, want = held(n, dim, before, sizes, coordinate), held(n, dim, after, sizes, coordinate)
    at = np.minimum(np.searchsorted(have, want), max(len(have) - 1, 0))
    return np.where(have[at] == want, at, -1) if len(have) else np.full(len(want), -1)


def _everywhere(sizes):
    return itertools.product(*(range(k) for k in sizes))


@functools.lru_cache(maxsize=1024)
def plan(src: tuple, dst: tuple, shape: tuple, sizes: tuple) -> list:
    """The steps from ``src`` to ``dst`` (placements, one of them or both with a _StridedShard): partial sums
    reduced (all-reduce), then, per tensor dimension, gathers of the mesh dimension that split it last until every
    rank's rows under ``dst`` are among its rows, then one local selection."""
    cur, steps = list(src), []
    for d, p in enumerate(src):
        if p.is_partial() and p != dst[d]:
            steps.append(("all_reduce", d, (p.reduce_op,)))
            cur[d] = Replicate()
    for i, n in enumerate(shape):
        while any((selected_positions(n, i, tuple(cur), dst, sizes, c) < 0).any() for c in _everywhere(sizes)):
            order = _order(tuple(cur), sizes, i)
            splitting = [e for e, p in enumerate(cur) if _is_shard_like(p) and p.dim == i]
            d = order[-1] if order is not None else splitting[-1]
            after = tuple(Replicate() if e == d else p for e, p in enumerate(cur))
            if any((gathered_positions(n, i, tuple(cur), after, sizes, c, d)[1] < 0).any() for c in _everywhere(sizes)):
                from ._api import _named
                raise RuntimeError(f"Can not redistribute from {_named(src)} to {_named(dst)}: gathering mesh "
                                   f"dimension {d} of {_named(cur)} would not give every rank its rows of tensor "
                                   f"dimension {i}")
            steps.append(("gather", d, (i,)))
            cur = list(after)
    if tuple(cur) != tuple(dst):
        steps.append(("select", None, (dst,)))
    return steps
