"""numpy's stacking and splitting family on top of cat, split and narrow: atleast_1d/2d/3d, hstack,
vstack, dstack, column_stack, tensor_split, split_with_sizes, hsplit, vsplit, dsplit."""
from __future__ import annotations

import operator

from .. import _dtype as dt
from .. import layout as L
from . import views
from .registry import op
from .shape_ops import Split, cat, split


def atleast_shape(rank, shape):
    """The shape atleast_{rank}d gives: 0-d becomes all 1s, 1-d (n) a row (1, n) (and (1, n, 1) for
    rank 3), 2-d (m, n) gets a last 1 for rank 3; higher ranks stay as they are."""
    shape = tuple(shape)
    if len(shape) >= rank:
        return shape
    padded = {0: (), 1: (1,) + shape, 2: shape}[len(shape)]
    return padded + (1,) * (rank - len(padded))


def _atleast(rank, tensors):
    """One tensor in, one out; several (or one list of them), a tuple."""
    def one(x):
        shape = atleast_shape(rank, x.shape)
        return x if shape == tuple(x.shape) else views.reshape(x, shape)
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        return tuple(one(x) for x in tensors[0])
    return one(tensors[0]) if len(tensors) == 1 else tuple(one(x) for x in tensors)


@op(method=False, samples=lambda t: [
    t.S("atleast_1d", lambda x: atleast_1d(x) * 1, t.rn()),
    t.S("atleast_1d-list", lambda a, b: atleast_1d([a, b]), t.rn(), t.rn(2, 2))])
def atleast_1d(*tensors):
    return _atleast(1, tensors)


@op(method=False, samples=lambda t: [
    t.S("atleast_2d", lambda a, b, c: atleast_2d(a, b, c), t.rn(), t.rn(3), t.NC(t.rn(2, 2), "F"))])
def atleast_2d(*tensors):
    return _atleast(2, tensors)


@op(method=False, samples=lambda t: [
    t.S("atleast_3d", lambda a, b, c: atleast_3d((a, b, c)), t.rn(), t.rn(3), t.rn(2, 3)),
    t.S("atleast_3d-one", lambda x: atleast_3d(x) * 1, t.rn(2, 1, 2, 1))])
def atleast_3d(*tensors):
    return _atleast(3, tensors)


def _stacked(name, tensors, rank):
    tensors = list(tensors)
    if not tensors:
        raise RuntimeError(f"{name} expects a non-empty TensorList")
    return [x.reshape(atleast_shape(rank, x.shape)) for x in tensors]


@op(method=False, samples=lambda t: [
    t.S("hstack", lambda a, b: hstack([a, b]), t.rn(2, 3), t.NC(t.rn(2, 2), "F")),
    t.S("hstack-1d", lambda a, b: hstack((a, b)), t.rn(3), t.rn())])
def hstack(tensors):
    """Joined along dim 1 (dim 0 for 1-d and 0-d tensors)."""
    tensors = _stacked("hstack", tensors, 1)
    return cat(tensors, 0 if tensors[0].ndim == 1 else 1)


@op(method=False, aliases=("row_stack",), samples=lambda t: [
    t.S("vstack", lambda a, b: vstack([a, b]), t.rn(3), t.NC(t.rn(2, 3), "F"))])
def vstack(tensors):
    """Joined along dim 0, 0-d and 1-d tensors as rows."""
    return cat(_stacked("vstack", tensors, 2), 0)


@op(method=False, samples=lambda t: [
    t.S("dstack", lambda a, b, c: dstack([a, b, c]), t.rn(2), t.rn(1, 2), t.rn(1, 2, 2))])
def dstack(tensors):
    """Joined along dim 2, each tensor first made at least 3-d (atleast_3d)."""
    return cat(_stacked("dstack", tensors, 3), 2)


@op(method=False, samples=lambda t: [
    t.S("column_stack", lambda a, b, c: column_stack([a, b, c]), t.rn(3), t.NC(t.rn(3, 2), "F"), t.rn(3, 1))])
def column_stack(tensors):
    """Joined along dim 1, 0-d and 1-d tensors as columns."""
    tensors = [x.reshape(x.numel(), 1) if x.ndim <= 1 else x for x in _stacked("column_stack", tensors, 0)]
    return cat(tensors, 1)


def split_bounds(n, indices_or_sections):
    """(start, length) of each piece tensor_split cuts a dim of size ``n`` into: ``sections`` pieces
    (the first n % sections one longer), or the pieces between the given indices (Python slices)."""
    if hasattr(indices_or_sections, "_layout"):
        indices_or_sections = _indices_of(indices_or_sections)
    if not isinstance(indices_or_sections, (list, tuple)):
        sections = operator.index(indices_or_sections)
        if sections <= 0:
            raise RuntimeError(f"tensor_split: number of sections must be larger than 0, got {sections}")
        size, longer = divmod(n, sections)
        lengths = [size + 1] * longer + [size] * (sections - longer)
        return [(sum(lengths[:i]), length) for i, length in enumerate(lengths)]
    cuts = [None] + [operator.index(i) for i in indices_or_sections] + [None]
    bounds = [slice(a, b).indices(n)[:2] for a, b in zip(cuts, cuts[1:])]
    return [(start, max(stop - start, 0)) for start, stop in bounds]


def _indices_of(t):
    if t.dtype != dt.int64:
        raise RuntimeError(f"tensor_split expected tensor_indices_or_sections to have dtype of long, but got "
                           f"{t.dtype}")
    if t.ndim > 1:
        raise RuntimeError(f"tensor_split expected tensor_indices_or_sections to be a zero-dimensional or "
                           f"one-dimensional tensor, but got a tensor with {t.ndim} dims")
    return t.item() if t.ndim == 0 else t.tolist()


@op(samples=lambda t: [
    t.S("tensor_split-sections", lambda x: x.tensor_split(3, 1), t.rn(2, 7)),
    t.S("tensor_split-indices", lambda x: tensor_split(x, [1, 4], dim=0), t.NC(t.rn(5, 2), "F")),
    t.S("tensor_split-backwards-indices", lambda x: x.tensor_split(t.const([3, 1]), 0), t.rn(5, 2))])
def tensor_split(x, indices_or_sections, dim=0):
    """Views of ``x`` along ``dim``: ``sections`` near-equal pieces, or the pieces between indices."""
    if x.ndim == 0:
        raise RuntimeError("tensor_split expected at least a 1-dimensional tensor, but got a tensor with 0 dims")
    dim = L.normalize_dim(dim, x.ndim, "tensor_split")
    bounds = split_bounds(x.shape[dim], indices_or_sections)
    if all(start == sum(n for _, n in bounds[:i]) for i, (start, _) in enumerate(bounds)):
        return Split.apply(x, tuple(n for _, n in bounds), dim)   # (consecutive pieces: one cat back)
    return tuple(views.narrow(x, dim, start, n) for start, n in bounds)


@op(samples=lambda t: [t.S("split_with_sizes", lambda x: x.split_with_sizes([2, 0, 1], 1), t.rn(2, 3))])
def split_with_sizes(x, split_sizes, dim=0):
    return split(x, list(split_sizes), dim)


def split_dim(name, x, indices_or_sections):
    """The dim h/v/dsplit cut, after their checks (an int must divide that dim evenly)."""
    least, dim = {"hsplit": (1, 1 if x.ndim > 1 else 0), "vsplit": (2, 0), "dsplit": (3, 2)}[name]
    if x.ndim < least:
        raise RuntimeError(f"torch.{name} requires a tensor with at least {least} dimension, but got a tensor with "
                           f"{x.ndim} dimensions!")
    n = x.shape[dim]
    if isinstance(indices_or_sections, int) and indices_or_sections and n % indices_or_sections:
        raise RuntimeError(f"torch.{name} attempted to split along dimension {dim}, but the size of the dimension "
                           f"{n} is not divisible by the split_size {indices_or_sections}!")
    return dim


@op(samples=lambda t: [
    t.S("hsplit", lambda x: x.hsplit(2), t.rn(3, 4)),
    t.S("hsplit-1d-indices", lambda x: hsplit(x, [2]), t.rn(5))])
def hsplit(x, indices_or_sections):
    return tensor_split(x, indices_or_sections, split_dim("hsplit", x, indices_or_sections))


@op(samples=lambda t: [t.S("vsplit", lambda x: x.vsplit([1, 2]), t.NC(t.rn(4, 2), "F"))])
def vsplit(x, indices_or_sections):
    return tensor_split(x, indices_or_sections, split_dim("vsplit", x, indices_or_sections))


@op(samples=lambda t: [t.S("dsplit", lambda x: x.dsplit(2), t.rn(2, 1, 4))])
def dsplit(x, indices_or_sections):
    return tensor_split(x, indices_or_sections, split_dim("dsplit", x, indices_or_sections))
