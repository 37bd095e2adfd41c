"""ONNX lowerings of the numpy-style shape ops (stacking, splitting, windows, turns) and of torch's
``*_copy`` ops, which lower as the views they copy. See ``lowerings``."""
from __future__ import annotations

import numpy as np

from ..layout import Layout
from ..ops.registry import OPS, attach_rule
from ..ops.shape_ops import repeat_counts
from ..ops.stacking import atleast_shape, split_bounds, split_dim
from ..ops.views import _positions
from .dtypes import code
from .lowerings import (INT64_MIN, _dim, _expand, _fixed_parts, _flip, _identity, _np, _operand, _repeat,
                        _sizes, _varargs, lowers)

for _name in ("real", "conj", "conj_physical", "resolve_conj", "resolve_neg"):
    attach_rule(_name, "onnx", _identity)


@lowers("select")
def _select(L, x, dim, index):
    return L.op("Gather", L.value(x), L.scalar(index), axis=_dim(dim, x.ndim))


@lowers("ravel")
def _ravel(L, x):
    return L.op("Reshape", L.value(x), L.ints([-1]))


@lowers("_unfold")
def _unfold(L, x, dimension, size, step):
    """A Gather of every window's indices along the dim ((windows, size) in its place), the size
    moved last; the window count from the dim's traced size, so it follows the input."""
    if x.ndim == 0:
        return L.op("Reshape", L.value(x), L.ints([size]))
    d = _dim(dimension, x.ndim)
    windows = (_sizes(L, x)[d] - size) // step + 1
    starts = L.op("Range", L.scalar(0), L.scalar(windows), L.scalar(1))
    index = L.op("Add", L.op("Unsqueeze", L.op("Mul", starts, L.scalar(step)), L.ints([1])),
                 L.constant(np.arange(size, dtype=np.int64)[None, :]))
    gathered = L.op("Gather", L.value(x), index, axis=d)
    perm = list(range(d + 1)) + list(range(d + 2, x.ndim + 1)) + [d + 1]
    return L.op("Transpose", gathered, perm=perm)


@lowers("sum_to_size")
def _sum_to_size(L, x, *size):
    size = _varargs(size)
    lead = x.ndim - len(size)
    dims = list(range(lead)) + [lead + i for i, n in enumerate(size) if n == 1 and x.shape[lead + i] != 1]
    value = L.value(x) if L.out.dtype == x.dtype else L.op("Cast", L.value(x), to=code(L.out.dtype))  # (ints: int64)
    if not dims:
        return L.op("Identity", value)
    summed = L.op("ReduceSum", value, L.ints(dims), keepdims=1)
    return L.op("Reshape", summed, L.ints(list(size))) if lead else summed


@lowers("tile")
def _tile(L, x, *dims):
    dims = _varargs(dims)
    return _repeat(L, x, *((1,) * (x.ndim - len(dims)) + tuple(dims)))


@lowers("repeat_interleave")
def _repeat_interleave(L, x, repeats=None, dim=None, *, output_size=None):
    """An int count: each slice tiled in a new dim after ``dim``, merged into it. A tensor of counts
    (fixed while tracing): a Gather of the indices they repeat."""
    if repeats is None or not isinstance(repeats, int) and not L.tracer.constant(repeats):
        raise NotImplementedError("minidl.onnx.export: repeat_interleave with traced counts (the output size "
                                  "depends on the data) is not lowered")
    value, sizes = L.value(x), _sizes(L, x)
    if dim is None:
        value, sizes, dim = L.op("Reshape", value, L.ints([-1])), [-1], 0
    d = _dim(dim, len(sizes))
    if not isinstance(repeats, int):
        n = x.shape[d] if sizes != [-1] else x.numel()
        index = np.repeat(np.arange(n), repeat_counts(repeats, n))
        return L.op("Gather", value, L.constant(index, np.int64), axis=d)
    tiled = L.op("Tile", L.op("Unsqueeze", value, L.ints([d + 1])),
                 L.ints([1] * (d + 1) + [repeats] + [1] * (len(sizes) - d - 1)))
    return L.op("Reshape", tiled, L.ints(sizes[:d] + [-1] + sizes[d + 1:]))


def _flipped(L, value, dims):
    n = len(dims)
    return L.op("Slice", value, L.ints([-1] * n), L.ints([INT64_MIN] * n), L.ints(dims), L.ints([-1] * n))


@lowers("rot90")
def _rot90(L, x, k=1, dims=(0, 1)):
    d0, d1 = (_dim(d, x.ndim) for d in dims)
    k %= 4
    if k in (0, 2):
        return L.op("Identity", L.value(x)) if k == 0 else _flipped(L, L.value(x), [d0, d1])
    perm = list(range(x.ndim))
    perm[d0], perm[d1] = d1, d0
    return L.op("Transpose", _flipped(L, L.value(x), [d1 if k == 1 else d0]), perm=perm)


attach_rule("flipud", "onnx", lambda L, x: _flip(L, x, 0))
attach_rule("fliplr", "onnx", lambda L, x: _flip(L, x, 1))


def _atleast(rank):
    def rule(L, *tensors):
        listed = len(tensors) == 1 and isinstance(tensors[0], (list, tuple))
        tensors = tensors[0] if listed else tensors
        outs = tuple(L.op("Reshape", L.value(t), L.ints(list(atleast_shape(rank, _sizes(L, t))))) for t in tensors)
        return outs if listed or len(outs) > 1 else outs[0]
    return rule


for _rank in (1, 2, 3):
    attach_rule(f"atleast_{_rank}d", "onnx", _atleast(_rank))


def _stack(rank, axis):
    """Each tensor reshaped to at least ``rank`` dims (columns for column_stack's rank 0), then one
    Concat along ``axis`` (None: hstack's, 0 for 1-d tensors, else 1)."""
    def rule(L, tensors):
        dtype, values = _np(L.out), []
        for t in tensors:
            sizes = _sizes(L, t)
            shape = [-1, 1] if rank == 0 and t.ndim <= 1 else list(atleast_shape(rank, sizes))
            values.append(L.op("Reshape", _operand(L, t, dtype), L.ints(shape)))
        return L.op("Concat", *values, axis=(0 if L.out.ndim == 1 else 1) if axis is None else axis)
    return rule


for _name, (_rank, _axis) in {"hstack": (1, None), "vstack": (2, 0), "dstack": (3, 2), "column_stack": (0, 1)}.items():
    attach_rule(_name, "onnx", _stack(_rank, _axis))


def _pieces(L, x, indices_or_sections, dim):
    """One Slice per piece tensor_split cuts (their number and sizes as while tracing)."""
    if hasattr(indices_or_sections, "_layout") and not L.tracer.constant(indices_or_sections):
        raise NotImplementedError("minidl.onnx.export: tensor_split at traced indices is not lowered")
    if L.tracer.traced(x):
        _fixed_parts("tensor_split")
    d = _dim(dim, x.ndim)
    return tuple(L.op("Slice", L.value(x), L.ints([start]), L.ints([start + n]), L.ints([d]))
                 for start, n in split_bounds(x.shape[d], indices_or_sections))


attach_rule("tensor_split", "onnx", lambda L, x, indices_or_sections, dim=0: _pieces(L, x, indices_or_sections, dim))
for _name in ("hsplit", "vsplit", "dsplit"):
    attach_rule(_name, "onnx", lambda L, x, ios, _name=_name: _pieces(L, x, ios, split_dim(_name, x, ios)))
attach_rule("split_with_sizes", "onnx", lambda L, x, split_sizes, dim=0: OPS["split"].rules["onnx"](
    L, x, list(split_sizes), dim))



@lowers("diagonal_copy")
def _diagonal_copy(L, x, offset=0, dim1=0, dim2=1):
    """The two dims moved last and merged, then a Gather of the diagonal's positions in them."""
    d1, d2 = _dim(dim1, x.ndim), _dim(dim2, x.ndim)
    rest = [d for d in range(x.ndim) if d not in (d1, d2)]
    n2, length = x.shape[d2], L.out.shape[-1]
    start = offset if offset >= 0 else -offset * n2
    moved = L.op("Transpose", L.value(x), perm=rest + [d1, d2])
    merged = L.op("Reshape", moved, L.ints([_sizes(L, x)[d] for d in rest] + [-1]))
    index = start + np.arange(length) * (n2 + 1)
    return L.op("Gather", merged, L.constant(index, np.int64), axis=len(rest))


@lowers("as_strided_copy")
def _as_strided_copy(L, x, size, stride, storage_offset=None):
    """A Gather of the storage positions, when ``x`` is its whole storage (a graph value has no other)."""
    if not x.is_contiguous() or x._layout.offset or x.numel() != x._storage.buf.size:
        raise NotImplementedError("minidl.onnx.export: as_strided_copy of a tensor that is not its whole storage "
                                  "is not lowered")
    offset = 0 if storage_offset is None else storage_offset
    index = _positions(Layout(tuple(size), tuple(stride), offset))
    return L.op("Gather", L.op("Reshape", L.value(x), L.ints([-1])), L.constant(index, np.int64), axis=0)


# the other copies lower as the views they copy
attach_rule("alias_copy", "onnx", _identity)
attach_rule("expand_copy", "onnx", lambda L, x, size, *, implicit=False: _expand(L, x, *size))
for _copy, _view in {"narrow_copy": "narrow", "permute_copy": "permute", "squeeze_copy": "squeeze", "t_copy": "t",
                     "transpose_copy": "transpose", "unbind_copy": "unbind", "unfold_copy": "_unfold",
                     "unsqueeze_copy": "unsqueeze", "view_copy": "view",
                     "split_with_sizes_copy": "split_with_sizes"}.items():
    attach_rule(_copy, "onnx", OPS[_view].rules["onnx"])
