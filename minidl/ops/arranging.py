"""Ops that arrange existing values in new places: writes over a view's region out of place
(``select_scatter`` and its kin), matrices built around diagonals and blocks, differences along a
dim, the products and combinations of sets, and coordinates of flat indices. Each is composed of
views, ``StridedScatter`` (a tensor written through a layout into zeros), cat and gathers, so the
gradients come from theirs."""
from __future__ import annotations

import itertools
import math
import numbers

import numpy as np

from .. import _dtype as dt
from .. import layout as L
from . import views
from .core import check_devices, written_operand
from .creation import ones, tensor, zeros
from .elementwise import logical_xor, where
from .indexing import index_select
from .linalg import diag
from .registry import op
from . import shape_ops
from .shape_ops import cat, meshgrid, stack


# ----------------------------------------------------------------------------- writes over a region
def _select_region(shape, dim, index):
    return L.select(L.Layout(shape), L.normalize_dim(dim, len(shape), "select_scatter"), index)


def _slice_region(shape, dim=0, start=None, end=None, step=1):
    if step <= 0:
        raise RuntimeError(f"slice_scatter(): slice step must be positive, got {step}")
    return L.slice_dim(L.Layout(shape), L.normalize_dim(dim, len(shape), "slice_scatter"), start, end, step)


def _diagonal_region(shape, offset=0, dim1=0, dim2=1):
    return L.diagonal(L.Layout(shape), offset, dim1, dim2)


def _as_strided_region(shape, size, stride, storage_offset=None):
    if any(s < 0 for s in stride):
        raise RuntimeError(f"as_strided_scatter: Negative strides are not supported at the moment, got strides: "
                           f"{list(stride)}")
    rel = L.Layout(tuple(size), tuple(stride), 0 if storage_offset is None else storage_offset)
    lo, hi = rel.span()
    if rel.numel and (lo < 0 or hi >= math.prod(shape)):
        raise RuntimeError(f"as_strided_scatter: size {list(size)}, stride {list(stride)} and offset {rel.offset} "
                           f"reach outside the {math.prod(shape)} elements of the input")
    return rel


# op name -> (x's shape, the op's arguments after src) -> the layout, relative to a packed x, of the region
# the op overwrites (its ONNX lowering reads these too)
REGIONS = {"select_scatter": _select_region, "slice_scatter": _slice_region,
           "diagonal_scatter": _diagonal_region, "as_strided_scatter": _as_strided_region}


def _embedded(op, x, src, *args, **kwargs):
    """x with ``src`` written over the region of x that REGIONS[op] picks."""
    check_devices(op, x, src)
    rel = REGIONS[op](tuple(x.shape), *args, **kwargs)
    if tuple(src.shape) != tuple(rel.shape):
        raise RuntimeError(f"{op}(): expected src to have a size equal to the slice of self. src size = "
                           f"{list(src.shape)}, slice size = {list(rel.shape)}")
    region = views.StridedScatter.apply(ones(src.shape, dtype=dt.bool_, device=x.device), x.shape, rel)
    return where(region, views.StridedScatter.apply(src.to(x.dtype), x.shape, rel), x)


@op(samples=lambda t: [
    t.S("select_scatter", lambda x, s: x.select_scatter(s, 1, -1), t.rn(3, 4), t.rn(3)),
    t.S("select_scatter-dim0", lambda x, s: select_scatter(x, s, 0, 1), t.NC(t.rn(3, 4), "F"), t.rn(4))])
def select_scatter(x, src, dim, index):
    """A copy of x with ``x.select(dim, index)`` replaced by src."""
    return _embedded("select_scatter", x, src, dim, index)


@op(samples=lambda t: [
    t.S("slice_scatter", lambda x, s: x.slice_scatter(s, 1, 1, None, 2), t.rn(3, 5), t.rn(3, 2)),
    t.S("slice_scatter-dim0", lambda x, s: slice_scatter(x, s, start=-2), t.rn(4, 3), t.NC(t.rn(2, 3), "F"))])
def slice_scatter(x, src, dim=0, start=None, end=None, step=1):
    """A copy of x with ``x[start:end:step]`` along ``dim`` replaced by src."""
    return _embedded("slice_scatter", x, src, dim, start, end, step)


@op(samples=lambda t: [
    t.S("diagonal_scatter", lambda x, s: x.diagonal_scatter(s, 1), t.rn(3, 4), t.rn(3)),
    t.S("diagonal_scatter-3d", lambda x, s: diagonal_scatter(x, s, -1, 0, 2), t.rn(3, 2, 3), t.rn(2, 2))])
def diagonal_scatter(x, src, offset=0, dim1=0, dim2=1):
    """A copy of x with ``x.diagonal(offset, dim1, dim2)`` replaced by src."""
    return _embedded("diagonal_scatter", x, src, offset, dim1, dim2)


@op(samples=lambda t: [
    # (the region addresses x's storage, so x's layout changes the answer)
    t.S("as_strided_scatter", lambda x, s: x.as_strided_scatter(s, (2, 2), (1, 3), 1), t.rn(3, 4), t.rn(2, 2),
        any_layout=False)])
def as_strided_scatter(x, src, size, stride, storage_offset=None):
    """A copy of x with the part of x's storage that ``x.as_strided(size, stride, storage_offset)`` views
    replaced by src: as torch's, the region is read through x's own layout (offset: x's by default), and
    whatever of it x does not view is dropped."""
    check_devices("as_strided_scatter", x, src)
    offset = x.storage_offset() if storage_offset is None else storage_offset
    held = (x.untyped_storage().nbytes() // x.dtype.itemsize,)
    rel = _as_strided_region(held, size, stride, offset)
    if tuple(src.shape) != tuple(rel.shape):
        raise RuntimeError(f"as_strided_scatter(): expected src to have a size equal to the slice of self. src "
                           f"size = {list(src.shape)}, slice size = {list(rel.shape)}")
    own = L.Layout(tuple(x.shape), tuple(x.stride()), x.storage_offset())
    storage = views.StridedScatter.apply(x, held, own)
    region = views.StridedScatter.apply(ones(src.shape, dtype=dt.bool_, device=x.device), held, rel)
    storage = where(region, views.StridedScatter.apply(src.to(x.dtype), held, rel), storage)
    return storage.as_strided(own.shape, own.strides, own.offset).contiguous()


# ----------------------------------------------------------------------------- diagonals and blocks
@op(samples=lambda t: [
    t.S("diag_embed", lambda x: x.diag_embed(), t.rn(2, 3)),
    t.S("diag_embed-offset-dims", lambda x: diag_embed(x, -1, 0, 2), t.NC(t.rn(2, 3), "F"))])
def diag_embed(x, offset=0, dim1=-2, dim2=-1):
    """x's last dim laid along the ``offset``-th diagonal of dims ``dim1``, ``dim2`` of a new tensor of zeros
    (one dim more than x)."""
    shape, rel = diag_embed_geometry(tuple(x.shape), offset, dim1, dim2)
    return views.StridedScatter.apply(x if x.ndim else x.reshape(1), shape, rel)


def diag_embed_geometry(x_shape, offset, dim1, dim2):
    """diag_embed's output shape, and the layout of its diagonal (where x goes) in it."""
    d1, d2 = (L.normalize_dim(d, len(x_shape) + 1, "diag_embed") for d in (dim1, dim2))
    if d1 == d2:
        raise RuntimeError(f"diag_embed(): diagonal dimensions cannot be identical {dim1}, {dim2}")
    n = (x_shape[-1] if x_shape else 1) + abs(offset)
    shape = list(x_shape[:-1])
    for d in sorted((d1, d2)):
        shape.insert(d, n)
    return tuple(shape), L.diagonal(L.Layout(shape), offset, d1, d2)


@op(samples=lambda t: [
    t.S("diagflat", lambda x: x.diagflat(), t.rn(2, 2)),
    t.S("diagflat-offset", lambda x: diagflat(x, -2), t.rn(3))])
def diagflat(x, offset=0):
    """The flattened x as the ``offset``-th diagonal of a square matrix."""
    return diag(x.reshape(-1), offset)


@op(method=False, samples=lambda t: [
    t.S("block_diag", lambda a, b, c: block_diag(a, b, c), t.rn(2, 3), t.rn(3), t.rn())])
def block_diag(*tensors):
    """The tensors (0-d: 1x1, 1-d: a row, 2-d) as the blocks along the diagonal of a matrix of zeros."""
    for i, x in enumerate(tensors):
        if x.ndim > 2:
            raise RuntimeError(f"torch.block_diag: Input tensors must have 2 or fewer dimensions. Input {i} has "
                               f"{x.ndim} dimensions")
    check_devices("block_diag", *tensors)
    dtype = dt.result_type(*tensors) if tensors else dt.get_default_dtype()
    device = tensors[0].device if tensors else None
    blocks = [x.reshape((1,) * (2 - x.ndim) + tuple(x.shape)).to(dtype) for x in tensors]
    width = sum(b.shape[1] for b in blocks)
    rows, before = [], 0
    for b in blocks:
        after = width - before - b.shape[1]
        rows.append(cat([zeros(b.shape[0], before, dtype=dtype, device=device), b,
                         zeros(b.shape[0], after, dtype=dtype, device=device)], 1))
        before += b.shape[1]
    return cat(rows, 0) if rows else zeros(1, 0, dtype=dtype, device=device)


@op(method=False, samples=lambda t: [
    t.S("constant_pad_nd", lambda x: constant_pad_nd(x, (1, -1, 0, 2), 0.5), t.rn(3, 4))])
def constant_pad_nd(x, pad, value=0):
    """``pad`` in constant mode: the last len(pad) // 2 dims, last dim first, negative pads cropping."""
    return shape_ops.pad(x, pad, "constant", value)


@op(method=False, samples=lambda t: [
    t.S("fill", lambda x, v: fill(x, v), t.rn(2, 3), t.rn())])
def fill(x, value):
    """A tensor like x holding ``value`` (a number, or a 0-d tensor that gets the sum of the output's
    gradient) everywhere, in x's dtype; as torch's, it is a function of x too, of zero gradient."""
    value = written_operand(value, x, "fill")
    if value.ndim:
        raise RuntimeError(f"fill only supports 0-dimension value tensor but got tensor with {value.ndim} "
                           f"dimensions.")
    return where(tensor(True, device=x.device), value.to(x.dtype), x)


# ----------------------------------------------------------------------------- differences, sets, coordinates
@op(samples=lambda t: [
    t.S("diff", lambda x: x.diff(), t.rn(3, 4)),
    t.S("diff-n2-dim0-ends", lambda x, p, a: diff(x, 2, 0, prepend=p, append=a), t.rn(3, 4), t.rn(1, 4),
        t.rn(2, 4))])
def diff(x, n=1, dim=-1, prepend=None, append=None):
    """The n-th forward difference along ``dim`` (xor for bools), after prepend and append join x there."""
    if x.ndim == 0:
        raise RuntimeError("diff expects input to be at least one-dimensional")
    if n < 0:
        raise RuntimeError(f"order must be non-negative but got {n}")
    dim = L.normalize_dim(dim, x.ndim, "diff")
    if n == 0:   # (as torch's: x itself, prepend and append left out)
        return x
    parts = [p for p in (prepend, x, append) if p is not None]
    if len(parts) > 1:
        x = cat([p if p.ndim else p.expand(x.shape[:dim] + (1,) + x.shape[dim + 1:]) for p in parts], dim)
    for _ in range(n):
        length = max(x.shape[dim] - 1, 0)
        later, earlier = x.narrow(dim, min(1, x.shape[dim]), length), x.narrow(dim, 0, length)
        x = logical_xor(later, earlier) if x.dtype is dt.bool_ else later - earlier
    return x


@op(method=False, samples=lambda t: [
    t.S("cartesian_prod", lambda a, b: cartesian_prod(a, b), t.rn(3), t.rn(2)),
    t.S("cartesian_prod-one", lambda a: cartesian_prod(a) * 1, t.rn(3))])
def cartesian_prod(*tensors):
    """Every tuple with one element from each 1-d tensor, in order, as the rows of a matrix (one tensor:
    itself)."""
    for i, x in enumerate(tensors):
        if x.ndim != 1:
            raise RuntimeError(f"cartesian_prod expects 1D tensors, but got tensor {i} of shape {list(x.shape)}")
    if len(tensors) == 1:
        return tensors[0]
    return stack([g.reshape(-1) for g in meshgrid(*tensors, indexing="ij")], 1)


@op(method=False, samples=lambda t: [
    t.S("combinations", lambda x: combinations(x), t.rn(4)),
    t.S("combinations-r3-replacement", lambda x: combinations(x, 3, with_replacement=True), t.rn(3))])
def combinations(x, r=2, with_replacement=False):
    """The length-r combinations of a 1-d x's elements (by position, in order) as the rows of a matrix,
    as itertools.combinations (or combinations_with_replacement) would list them."""
    if x.ndim != 1:
        raise RuntimeError(f"Expect a 1D vector, but got shape {list(x.shape)}")
    if r < 0:
        raise RuntimeError(f"Expect a non-negative number, but got {r}")
    if r == 0:
        return x.new_zeros((0,))
    chosen = tensor(combination_indices(x.shape[0], r, with_replacement), device=x.device)
    return index_select(x, 0, chosen.reshape(-1)).reshape(chosen.shape)


def combination_indices(n, r, with_replacement):
    """The positions each row of ``combinations`` takes, an int64 (count, r) array."""
    chosen = (itertools.combinations_with_replacement if with_replacement else itertools.combinations)(range(n), r)
    return np.array(list(chosen), dtype=np.int64).reshape(-1, r)


@op(method=False)
def unravel_index(indices, shape):
    """The coordinates in ``shape`` (row-major) of flat indices: one int64 tensor per dim, each of the
    indices' shape; an index wraps as Python's floor division and modulo take it."""
    if indices.dtype.is_floating_point or indices.dtype is dt.bool_:
        raise TypeError(f"unravel_index: expected 'indices' to be integer dtype, but got {indices.dtype}")
    shape = (shape,) if isinstance(shape, numbers.Integral) else tuple(int(n) for n in shape)
    if any(n < 0 for n in shape):
        raise ValueError(f"unravel_index: 'shape' cannot have negative values, but got {shape}")
    if math.prod(shape) == 0 and indices.numel():
        raise RuntimeError(f"unravel_index: 'shape' {shape} holds no elements, so no index fits it")
    flat = indices.to(dt.int64)
    return tuple((flat // stride) % n for n, stride in zip(shape, L.contiguous_strides(shape)))
