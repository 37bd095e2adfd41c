"""Boxes: the index math of checkpoints that reshard.

Every tensor in a checkpoint is a global tensor of some ``size``, stored as *chunks*: boxes given by
``offsets`` (where the box starts in each dimension) and ``sizes`` (its extent), each kept row-major
in a file. A plain tensor is one box covering all of it; a rank's shard of a split tensor is a box
of the global one. Loading computes, for each box a rank wants, its overlap with each stored box, and
reads just the bytes of that overlap: the *runs* below, the contiguous stretches of a sub-box inside
a row-major box.

``LocalSlice`` says "this tensor is the box at ``offsets`` of a global tensor of ``global_size``";
anything with a ``__dcp_slices__()`` method (the global tensors of a later issue) says the same.
"""
from __future__ import annotations

import math
import operator

from ..._tensor import Tensor


class LocalSlice:
    """This rank's part of a tensor split across ranks: ``tensor`` is the box of the global tensor of
    ``global_size`` that starts at ``offsets``. In a state dict given to ``save`` each rank passes its
    own box under the same key; ``load`` fills ``tensor`` in place with that box of the checkpoint,
    whatever boxes the checkpoint was saved in."""

    def __init__(self, tensor, offsets, global_size):
        if not isinstance(tensor, Tensor):
            raise TypeError(f"LocalSlice: tensor must be a minidl Tensor, got {type(tensor).__name__}")
        self.tensor = tensor
        self.offsets = tuple(operator.index(o) for o in offsets)   # ints (numpy's too), for the JSON metadata
        self.global_size = tuple(operator.index(g) for g in global_size)
        shape = tuple(tensor.shape)
        if not (len(self.offsets) == len(self.global_size) == len(shape)) or any(
                o < 0 or o + s > g for o, s, g in zip(self.offsets, shape, self.global_size)):
            raise ValueError(f"LocalSlice: a tensor of shape {shape} at offsets {self.offsets} does not fit in "
                             f"a global tensor of size {self.global_size}")

    def __dcp_slices__(self):
        """(global size, [(offsets, local tensor)]): the boxes this rank holds."""
        return self.global_size, [(self.offsets, self.tensor)]

    def __repr__(self):
        return f"LocalSlice(shape={tuple(self.tensor.shape)}, offsets={self.offsets}, global_size={self.global_size})"


def slices_of(value):
    """(global size, [(offsets, tensor)]) of a tensor (one box, all of it) or of a sliced value; None
    for anything else."""
    if isinstance(value, Tensor):
        return tuple(value.shape), [((0,) * value.dim(), value)]
    if hasattr(type(value), "__dcp_slices__"):
        return value.__dcp_slices__()
    return None


def volume(sizes) -> int:
    return math.prod(sizes)


def overlap(offsets_a, sizes_a, offsets_b, sizes_b):
    """(offsets, sizes) of the intersection of two boxes, or None where they do not meet."""
    low = [max(a, b) for a, b in zip(offsets_a, offsets_b)]
    high = [min(a + n, b + m) for a, n, b, m in zip(offsets_a, sizes_a, offsets_b, sizes_b)]
    if any(h <= lo for lo, h in zip(low, high)):
        return None
    return tuple(low), tuple(h - lo for lo, h in zip(low, high))


def _whole_from(box_sizes, sub_sizes) -> int:
    """The first dimension from which on the sub-box covers the box whole (those lie contiguous)."""
    inner = len(box_sizes)
    while inner > 0 and sub_sizes[inner - 1] == box_sizes[inner - 1]:
        inner -= 1
    return inner


def run_count(box_sizes, sub_sizes) -> int:
    """How many contiguous runs ``runs`` gives."""
    inner = _whole_from(box_sizes, sub_sizes)
    return 1 if inner == 0 else volume(sub_sizes[:inner - 1])


def runs(box_offsets, box_sizes, sub_offsets, sub_sizes):
    """The contiguous element runs (start, length) of the sub-box inside the row-major box, in order.
    Trailing dimensions the sub-box covers whole merge into one run: a split along dimension 0 is a
    single run, a split along the last dimension one run per row."""
    inner = _whole_from(box_sizes, sub_sizes)
    if inner == 0:
        return [(0, volume(box_sizes))] if volume(box_sizes) else []
    strides = row_major_strides(box_sizes)
    length = sub_sizes[inner - 1] * strides[inner - 1]
    rel = [o - b for o, b in zip(sub_offsets, box_offsets)]
    out = []
    for index in _indices(sub_sizes[:inner - 1]):
        start = sum((rel[d] + index[d]) * strides[d] for d in range(inner - 1)) + rel[inner - 1] * strides[inner - 1]
        out.append((start, length))
    return out


def span(box_offsets, box_sizes, sub_offsets, sub_sizes):
    """(start, stop): the elements of the row-major box from the sub-box's first to just after its last."""
    strides = row_major_strides(box_sizes)
    first = sum((o - b) * st for o, b, st in zip(sub_offsets, box_offsets, strides))
    last = first + sum((n - 1) * st for n, st in zip(sub_sizes, strides))
    return first, last + 1


def row_major_strides(sizes) -> tuple:
    return tuple(math.prod(sizes[d + 1:]) for d in range(len(sizes)))


def box_index(offsets, within, sizes) -> tuple:
    """The index (slices) of the box at ``offsets`` of ``sizes`` in a tensor that is itself the box at ``within``."""
    return tuple(slice(o - w, o - w + n) for o, w, n in zip(offsets, within, sizes))


def _indices(sizes):
    """Every index of a box of ``sizes``, row-major (one empty index for no dimensions)."""
    if not sizes:
        yield ()
        return
    for i in range(sizes[0]):
        for rest in _indices(sizes[1:]):
            yield (i, *rest)


def split_rows(offsets, sizes, parts: int):
    """A box cut along dimension 0 into at most ``parts`` boxes of near-equal rows (empty ones left out)."""
    rows, out, start = sizes[0], [], 0
    for p in range(parts):
        n = rows // parts + (p < rows % parts)
        if n:
            out.append(((offsets[0] + start, *offsets[1:]), (n, *sizes[1:])))
        start += n
    return out
