"""ONNX lowerings of the indexing and arranging ops: reducing scatters (ScatterElements with its
reductions), gathers along a dim (GatherElements), index_put (ScatterND), writes over a region
(ScatterElements along the dim, or at the region's flat positions known when exporting, with a warning),
diagonals (Where over an EyeLike), differences, blocks, products and combinations of sets. Sizes come
from the graph where they can, so a dynamic axis follows them. See ``lowerings``."""
from __future__ import annotations

import math

import numpy as np

from ..ops import arranging
from ..ops.indexing import identity_of
from ..ops.registry import attach_rule
from .lowerings import INT64_MAX, _dim, _np, _numel, _operand, _pad, _sizes, _warn_fixed_sizes, lowers

INT64 = np.dtype(np.int64)
_ONNX_REDUCTIONS = {"sum": "add", "prod": "mul", "amax": "max", "amin": "min"}


def _reduce_into(L, x, dim, where, index_shape, updates, reduce, include_self):
    """x's value with ``updates`` folded in at ``where`` (int64 values of ``index_shape``, sizes that may be
    traced) along dim."""
    dtype, d, data = _np(x), _dim(dim, x.ndim), L.value(x)
    if reduce == "mean" and dtype.kind != "f":
        raise NotImplementedError("minidl.onnx.export: scatter_reduce(reduce='mean') of integers (a floor "
                                  "division) is not lowered")
    if not include_self:
        start = L.op("ConstantOfShape", L.ints(index_shape), value=np.array([identity_of(reduce, dtype)], dtype))
        data = L.op("ScatterElements", data, where, start, axis=d)
    if reduce != "mean":
        return L.op("ScatterElements", data, where, updates, axis=d, reduction=_ONNX_REDUCTIONS[reduce])
    total = L.op("ScatterElements", data, where, updates, axis=d, reduction="add")
    start = L.op("ConstantOfShape", L.ints(_sizes(L, x)), value=np.array([include_self], dtype))
    ones = L.op("ConstantOfShape", L.ints(index_shape), value=np.array([1], dtype))
    count = L.op("ScatterElements", start, where, ones, axis=d, reduction="add")
    return L.op("Div", total, L.op("Max", count, L.constant(1, dtype)))


def _fits(x, index):
    if x.ndim == 0 or index.ndim != x.ndim:
        raise NotImplementedError("minidl.onnx.export: a reducing scatter of a 0-d input or index is not lowered")


@lowers("scatter_reduce")
def _scatter_reduce(L, x, dim, index, src, reduce, *, include_self=True):
    if index.numel() == 0:
        return L.op("Identity", L.value(x))
    _fits(x, index)
    updates = L.value(src)
    if tuple(src.shape) != tuple(index.shape):
        updates = L.op("Slice", updates, L.ints([0] * src.ndim), L.ints(_sizes(L, index)), L.ints(range(src.ndim)))
    return _reduce_into(L, x, dim, _operand(L, index, INT64), _sizes(L, index), updates, reduce, include_self)


@lowers("index_reduce")
def _index_reduce(L, x, dim, index, source, reduce, *, include_self=True):
    _fits(x, source)
    d = _dim(dim, x.ndim)
    shaped = L.op("Reshape", _operand(L, index, INT64), L.ints([-1 if k == d else 1 for k in range(x.ndim)]))
    expanded = L.op("Expand", shaped, L.ints(_sizes(L, source)))
    return _reduce_into(L, x, dim, expanded, _sizes(L, source), L.value(source), reduce, include_self)


@lowers("take_along_dim")
def _take_along_dim(L, x, indices, dim=None):
    if dim is None:
        flat = [L.op("Reshape", v, L.ints([-1])) for v in (L.value(x), _operand(L, indices, INT64))]
        return L.op("GatherElements", *flat, axis=0)
    d = _dim(dim, x.ndim)
    data, where = L.value(x), _operand(L, indices, INT64)
    if any(a != b for k, (a, b) in enumerate(zip(x.shape, indices.shape)) if k != d):   # (broadcast: sizes fixed)
        others = np.broadcast_shapes(*([1 if k == d else n for k, n in enumerate(t.shape)] for t in (x, indices)))
        data, where = (L.op("Expand", v, L.ints([t.shape[k] if k == d else n for k, n in enumerate(others)]))
                       for v, t in ((data, x), (where, indices)))
    return L.op("GatherElements", data, where, axis=d)


@lowers("index_put")
def _index_put(L, x, indices, values, accumulate=False):
    """ScatterND at the stacked (broadcast) index tensors of the leading dims; negatives wrapped. The
    broadcast shape and the wrap come from the graph's sizes, so they follow the input."""
    if any(i is None or not hasattr(i, "dtype") or i.dtype.name == "bool" for i in indices):
        raise NotImplementedError("minidl.onnx.export: index_put with None or boolean indices is not lowered")
    wrapped = [L.op("Mod", _operand(L, i, INT64), L.scalar(n)) for i, n in zip(indices, _sizes(L, x))]
    grid = wrapped[0]
    for w in wrapped[1:]:   # (a broadcast of all the indices: its shape is the one they share)
        grid = L.op("Add", grid, w)
    columns = [L.op("Unsqueeze", L.op("Expand", w, L.op("Shape", grid)), L.ints([-1])) for w in wrapped]
    stacked = L.op("Concat", *columns, axis=-1)
    target = L.op("Concat", L.op("Shape", grid), L.op("Shape", L.value(x), start=len(indices)), axis=0)
    updates = L.op("Expand", _operand(L, values, _np(x)), target)
    return L.op("ScatterND", L.value(x), stacked, updates, reduction="add" if accumulate else "none")


# ----------------------------------------------------------------------------- regions and diagonals
def _positions(rel):
    """The flat positions (int64, row-major over the region) that a layout relative to a packed tensor picks."""
    where = np.full(rel.shape, rel.offset, dtype=np.int64)
    for k, (n, stride) in enumerate(zip(rel.shape, rel.strides)):
        where = where + (np.arange(n, dtype=np.int64) * stride).reshape([n if j == k else 1 for j in range(rel.ndim)])
    return where.reshape(-1)


def _written(L, data, shape, rel, src):
    """``data`` (a value of ``shape``) with the value ``src`` written through ``rel``."""
    flat = L.op("Reshape", data, L.ints([-1]))
    put = L.op("ScatterElements", flat, L.constant(_positions(rel)), L.op("Reshape", src, L.ints([-1])), axis=0)
    return L.op("Reshape", put, L.ints(shape))


def _region_rule(name):
    def rule(L, x, src, *args, **kwargs):
        _warn_fixed_sizes(L, name, x, src)
        rel = arranging.REGIONS[name](tuple(x.shape), *args, **kwargs)
        return _written(L, L.value(x), x.shape, rel, _operand(L, src, _np(x)))
    return rule


def _scatter_along(L, x, d, where, updates):
    """x's value with ``updates`` written along dim d at the positions ``where`` (int64, along d only)."""
    shaped = L.op("Reshape", where, L.ints([-1 if k == d else 1 for k in range(x.ndim)]))
    return L.op("ScatterElements", L.value(x), L.op("Expand", shaped, L.op("Shape", updates)), updates, axis=d)


@lowers("select_scatter")
def _select_scatter(L, x, src, dim, index):
    """src, given dim back, written at ``index`` along it (a negative one counts from the end in ONNX too),
    its other sizes src's own: no size is fixed."""
    d = _dim(dim, x.ndim)
    updates = L.op("Unsqueeze", _operand(L, src, _np(x)), L.ints([d]))
    return _scatter_along(L, x, d, L.ints([index]), updates)


@lowers("slice_scatter")
def _slice_scatter(L, x, src, dim=0, start=None, end=None, step=1):
    """src written at start, start + step, ... along dim, as many as src has there. A negative start stays
    negative (counted from the end, as in ONNX); one clamped to 0 while tracing keeps the traced sizes."""
    d = _dim(dim, x.ndim)
    start = 0 if start is None else start
    if start < 0 and start + x.shape[d] < 0:
        return _region_rule("slice_scatter")(L, x, src, dim, start, end, step)
    updates = _operand(L, src, _np(x))
    count = L.op("Shape", updates, start=d, end=d + 1)
    steps = L.op("Range", L.scalar(0), L.op("Squeeze", count, L.ints([0])), L.scalar(1))
    where = L.op("Add", L.op("Mul", steps, L.scalar(step)), L.ints([start]))
    return _scatter_along(L, x, d, where, updates)


@lowers("as_strided_scatter")
def _as_strided_scatter(L, x, src, size, stride, storage_offset=None):
    """The region rule, whose layout is relative to a packed x: ONNX has no storage, so an x that is a view into
    more (or other) memory than its own values is refused."""
    whole = x.untyped_storage().nbytes() == x.numel() * x.element_size()
    if not (x.is_contiguous() and x.storage_offset() == 0 and whole):
        raise NotImplementedError("as_strided_scatter of a view (an input that is not its whole storage, packed) "
                                  "is not lowered: ONNX has no storage to address")
    return _region_rule("as_strided_scatter")(L, x, src, size, stride, storage_offset)


def _zeros(L, shape, dtype):
    return L.op("ConstantOfShape", L.ints(shape), value=np.array([0], dtype))


def _on_diagonal(L, value, length, rows, cols, offset, base):
    """``base`` (..., rows, cols) with ``value`` (..., length) along its ``offset``-th diagonal: a Where over an
    EyeLike of those (maybe traced) sizes, value padded to them and broadcast along the other of the two dims."""
    ndim = L.out.ndim
    padded = L.op("Pad", value, L.ints([0] * (2 * ndim - 3) + [(rows if offset >= 0 else cols) - length]))
    along = L.op("Unsqueeze", padded, L.ints([ndim - 1 if offset >= 0 else ndim - 2]))   # (by row, or by column)
    eye = L.op("EyeLike", L.op("ConstantOfShape", L.ints([rows, cols]), value=np.array([0], np.int64)), k=offset)
    return L.op("Where", L.op("Cast", eye, to=L.type_code(np.dtype(np.bool_))), along, base)


def _last_two_to(ndim, dim1, dim2):
    """The Transpose perm that moves the last two of ``ndim`` dims to dim1 and dim2, the others in order."""
    d1, d2 = _dim(dim1, ndim), _dim(dim2, ndim)
    others = iter(range(ndim - 2))
    return [ndim - 2 if k == d1 else ndim - 1 if k == d2 else next(others) for k in range(ndim)]


def _embed_diagonal(L, value, n, offset, dim1, dim2):
    """``value`` (n: its last size, maybe traced) along the ``offset``-th diagonal of dims dim1, dim2 of zeros,
    sizes from the graph's."""
    m = n + abs(offset)
    square = _on_diagonal(L, value, n, m, m, offset, L.constant(0, _np(L.out)))
    return L.op("Transpose", square, perm=_last_two_to(L.out.ndim, dim1, dim2))


@lowers("diagonal_scatter")
def _diagonal_scatter(L, x, src, offset=0, dim1=0, dim2=1):
    """x with dims dim1, dim2 moved last, src laid on their diagonal (its dims in that order, as torch's
    diagonal gives them), moved back: sizes from the graph's."""
    perm = _last_two_to(x.ndim, dim1, dim2)
    into = [int(k) for k in np.argsort(perm)]
    sizes = _sizes(L, x)
    moved = L.op("Transpose", L.value(x), perm=into)
    written = _on_diagonal(L, _operand(L, src, _np(x)), _sizes(L, src)[-1], sizes[into[-2]], sizes[into[-1]],
                           offset, moved)
    return L.op("Transpose", written, perm=perm)


@lowers("diag_embed")
def _diag_embed(L, x, offset=0, dim1=-2, dim2=-1):
    if x.ndim == 0:
        return _embed_diagonal(L, L.op("Reshape", L.value(x), L.ints([1])), 1, offset, dim1, dim2)
    return _embed_diagonal(L, L.value(x), _sizes(L, x)[-1], offset, dim1, dim2)


@lowers("diagflat")
def _diagflat(L, x, offset=0):
    """diag_embed of the flattened x."""
    return _embed_diagonal(L, L.op("Reshape", L.value(x), L.ints([-1])), _numel(L, x), offset, 0, 1)


# ----------------------------------------------------------------------------- differences, blocks, sets
@lowers("diff")
def _diff(L, x, n=1, dim=-1, prepend=None, append=None):
    if n == 0:
        return L.op("Identity", L.value(x))
    d, dtype = _dim(dim, x.ndim), _np(L.out)
    parts = [p for p in (prepend, x, append) if p is not None]
    ends = [1 if k == d else n for k, n in enumerate(_sizes(L, x))]
    value = L.op("Concat", *[_operand(L, p, dtype) if p.ndim else L.op("Expand", _operand(L, p, dtype), L.ints(ends))
                             for p in parts], axis=d) if len(parts) > 1 else L.value(x)
    for _ in range(n):
        later = L.op("Slice", value, L.ints([1]), L.ints([INT64_MAX]), L.ints([d]))
        earlier = L.op("Slice", value, L.ints([0]), L.ints([-1]), L.ints([d]))
        value = L.op("Xor" if dtype == np.bool_ else "Sub", later, earlier)
    return value


@lowers("block_diag")
def _block_diag(L, *tensors):
    """Each block padded left by the widths before it and right by those after: widths from the traced
    sizes, so they follow the input."""
    dtype = _np(L.out)
    shapes = [[1] * (2 - t.ndim) + _sizes(L, t) for t in tensors]
    width, before, rows = sum(s[1] for s in shapes), 0, []
    for t, shape in zip(tensors, shapes):
        block = L.op("Reshape", _operand(L, t, dtype), L.ints(shape))
        rows.append(L.op("Pad", block, L.ints([0, before, 0, width - before - shape[1]])))
        before += shape[1]
    return L.op("Concat", *rows, axis=0)


@lowers("cartesian_prod")
def _cartesian_prod(L, *tensors):
    if len(tensors) == 1:
        return L.op("Identity", L.value(tensors[0]))
    grid = [t.shape[0] for t in tensors]
    columns = [L.op("Reshape", L.op("Expand", L.op("Reshape", L.value(t), L.ints(
        [n if j == k else 1 for j, n in enumerate(grid)])), L.ints(grid)), L.ints([-1, 1]))
        for k, t in enumerate(tensors)]
    return L.op("Concat", *columns, axis=1)


@lowers("combinations")
def _combinations(L, x, r=2, with_replacement=False):
    if r == 0:
        return _zeros(L, [0], _np(x))
    chosen = arranging.combination_indices(x.shape[0], r, with_replacement)
    return L.op("Gather", L.value(x), L.constant(chosen), axis=0)


@lowers("unravel_index")
def _unravel_index(L, indices, shape):
    """Floor division as ONNX's exact Div of (i - i mod stride), mod with the divisor's sign (fmod=0)."""
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    flat = _operand(L, indices, INT64)
    strides = [math.prod(shape[k + 1:]) for k in range(len(shape))]
    coords = []
    for n, stride in zip(shape, strides):
        s = L.constant(stride, INT64)
        whole = L.op("Div", L.op("Sub", flat, L.op("Mod", flat, s)), s)
        coords.append(L.op("Mod", whole, L.constant(n, INT64)))
    return tuple(coords)


@lowers("fill")
def _fill(L, x, value):
    return L.op("Expand", _operand(L, value, _np(x)), L.op("Shape", L.value(x)))


@lowers("constant_pad_nd")
def _constant_pad_nd(L, x, pad, value=0):
    return _pad(L, x, pad, "constant", value)
