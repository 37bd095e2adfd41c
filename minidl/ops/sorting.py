"""Sorting and counting: sort, argsort, topk, unique, bincount, histc.

One primitive, ``argsort`` (the stable sort order along a dim, NaN counted as the largest value),
drives the sorting ops. Sorted values are gathered through the order, so their gradient is
scattered back through the same indices.
"""
from __future__ import annotations

import math
from collections import namedtuple

from .. import _dtype as dt
from ..layout import normalize_dim
from .core import as_operand, buf, cast, kernel, new_like_shape
from .creation import arange, zeros
from .shape_ops import cat
from .take_put import IndexPut
from .registry import op

return_types = {op: namedtuple(op, ["values", "indices"]) for op in ("sort", "topk")}


def argsort_raw(x, dim: int, descending: bool):
    """int64 stable sort order of ``x`` along ``dim`` (a normalized dim), no autograd."""
    out = new_like_shape(x.shape, dt.int64, x)
    if x.ndim == 0:
        return out.fill_(0)
    xc = cast(x, dt.arithmetic_dtype(x.dtype))
    kernel("argsort", x)(buf(xc), xc._layout, dim, descending, buf(out))
    return out


def _values(x, dim, indices):
    return x.gather(dim, indices) if x.ndim else x.clone()


@op(samples=lambda t: [
    t.S("sort-values", lambda x: x.sort(1).values, t.distinct(3, 4)),
    t.S("sort-descending-dim0", lambda x: sort(x, 0, descending=True)[0], t.NC(t.distinct(4, 3), "F"))])
def sort(x, dim=-1, descending=False, stable=False):
    """Always stable (ties keep their order), so ``stable`` changes nothing."""
    dim = normalize_dim(dim, x.ndim, "sort")
    indices = argsort_raw(x, dim, descending)
    return return_types["sort"](_values(x, dim, indices), indices)


@op()
def argsort(x, dim=-1, descending=False, stable=False):
    return argsort_raw(x, normalize_dim(dim, x.ndim, "argsort"), descending)


@op(samples=lambda t: [t.S("msort", msort, t.NC(t.distinct(4, 2), "neg"))])
def msort(x):
    return sort(x, 0).values


@op(samples=lambda t: [t.S("topk", lambda x: x.topk(2, largest=False).values, t.distinct(3, 5))])
def topk(x, k, dim=-1, largest=True, sorted=True):
    """The k largest (smallest) values along ``dim``, in sorted order whatever ``sorted`` says."""
    dim = normalize_dim(dim, x.ndim, "topk")
    n = x.shape[dim] if x.ndim else 1
    if not 0 <= k <= n:
        raise RuntimeError(f"topk: k ({k}) is out of range for dimension {dim} of size {n}")
    indices = argsort_raw(x, dim, largest)
    if x.ndim:
        indices = indices.narrow(dim, 0, k).contiguous()
    return return_types["topk"](_values(x, dim, indices), indices)


# ----------------------------------------------------------------------------- unique
@op()
def unique(x, sorted=True, return_inverse=False, return_counts=False, dim=None):
    """Distinct values (or slices along ``dim``), always in ascending order; NaNs are all distinct.

    The slices of ``x`` (elements when ``dim`` is None) are put in lexicographic order by stable
    sorts on one column at a time, last column first; a new value starts wherever a slice
    differs from the one before it."""
    x = x.detach()
    if dim is None:
        rows, rest = x.reshape(-1, 1), ()
    else:
        dim = normalize_dim(dim, x.ndim, "unique")
        moved = x.movedim(dim, 0)
        rest = tuple(moved.shape[1:])
        rows = moved.reshape(moved.shape[0], math.prod(rest))
    n = rows.shape[0]
    order = arange(n, device=x.device)
    for col in range(rows.shape[1] - 1, -1, -1):
        order = order[argsort_raw(rows[:, col][order], 0, False)]
    ordered = rows[order]
    starts = (ordered[1:] != ordered[:-1]).any(1)
    starts = cat([starts.new_ones(min(n, 1)), starts])
    group = starts.cumsum(0) - 1                      # group number of each sorted slice
    values = ordered[starts]
    values = values.reshape((values.shape[0],) + rest)
    if dim is not None:
        values = values.movedim(0, dim)
    out = (values,)
    if return_inverse:
        inverse = group.new_zeros(n).scatter(0, order, group)
        out += (inverse.reshape(x.shape) if dim is None else inverse,)
    if return_counts:
        out += (bincount(group, minlength=int(starts.sum())),)
    return out if len(out) > 1 else values


# ----------------------------------------------------------------------------- counting
@op(samples=lambda t: [t.S("bincount-weights", lambda w: bincount(t.const([1, 3, 1, 0]), w), t.rn(4))])
def bincount(x, weights=None, minlength=0):
    """How often each non-negative integer occurs in the 1-D ``x`` (or the sum of its ``weights``:
    differentiable in them)."""
    if x.ndim != 1 or x.dtype.category != 1:
        raise RuntimeError(f"bincount: expected a 1-D tensor of non-negative integers, got a {x.ndim}-D "
                           f"{x.dtype.name} tensor")
    if minlength < 0:
        raise RuntimeError(f"bincount: minlength should be >= 0, got {minlength}")
    if weights is not None and tuple(weights.shape) != tuple(x.shape):
        raise RuntimeError(f"bincount: weights of shape {list(weights.shape)} should have the input's shape "
                           f"{list(x.shape)}")
    size = minlength
    if x.numel():
        lo, hi = int(x.min()), int(x.max())
        if lo < 0:
            raise RuntimeError(f"bincount: the input holds a negative value ({lo}); only non-negative "
                               f"integers can be counted")
        size = max(size, hi + 1)
    if weights is None:
        return IndexPut.apply(zeros(size, dtype=dt.int64, device=x.device), x.long(), as_operand(1, x), True)
    result = weights.dtype if weights.dtype.is_floating_point else dt.float64
    return IndexPut.apply(zeros(size, dtype=result, device=x.device), x.long(), weights.to(result), True)


@op()
def histc(x, bins=100, min=0, max=0):
    """Histogram of ``x`` in ``bins`` equal bins over [min, max] (the data's range when min == max);
    values outside are ignored, ``max`` itself falls in the last bin."""
    if not x.dtype.is_floating_point:
        raise RuntimeError(f"histc: expected a floating point tensor, got {x.dtype.name}")
    if bins <= 0:
        raise RuntimeError(f"histc: bins must be > 0, got {bins}")
    lo, hi = float(min), float(max)
    if lo == hi and x.numel():
        lo, hi = float(x.min()), float(x.max())
    if lo == hi:
        lo, hi = lo - 1, hi + 1
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise RuntimeError(f"histc: range of [{lo}, {hi}] is not finite")
    if lo > hi:
        raise RuntimeError(f"histc: max must be larger than min (got min={min}, max={max})")
    flat = x.detach().reshape(-1)
    inside = flat[(flat >= lo) & (flat <= hi)]
    index = ((inside - lo) * bins / (hi - lo)).floor().long().clamp(0, bins - 1)
    return bincount(index, minlength=bins).to(x.dtype)
