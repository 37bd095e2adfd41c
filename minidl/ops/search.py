"""Order statistics and searches: median, nanmedian, kthvalue, mode, quantile, nanquantile, searchsorted,
bucketize, isin, argwhere, nonzero_static, unique_consecutive and histogram.

All stand on the ``argsort`` primitive (stable, NaN largest). An order statistic gathers the element at a
position of the sorted order, so its gradient goes back through that gather to the element picked. A
search steps all its values through torch's binary search at once (see ``_count_below``).
"""
from __future__ import annotations

import math
import numbers
from collections import namedtuple

import numpy as np

from .. import _dtype as dt
from ..layout import normalize_dim
from ..autograd import Function
from .core import from_host_array
from .creation import full, linspace, tensor
from .elementwise import maximum, where
from .indexing import nonzero
from .reduction import amax, amin
from .reduction_more import _along, running
from .registry import op
from .shape_ops import cat
from .sorting import argsort_raw, bincount

return_types = {name: namedtuple(name, fields) for name, fields in (
    ("median", ("values", "indices")), ("nanmedian", ("values", "indices")), ("kthvalue", ("values", "indices")),
    ("mode", ("values", "indices")), ("histogram", ("hist", "bin_edges")))}


# ----------------------------------------------------------------------------- order statistics
def _position(x, dim, ignore_nan):
    """Where each row's median sits in its stable sort (keepdim, int64). torch's CPU median partitions the
    (value, index) pairs, so among equal values it picks the one a stable sort puts there; a row with a NaN
    gives its first NaN (median), or the median of its other values (nanmedian; an all-NaN row: its first)."""
    n = x.shape[dim]
    nans = x.isnan().sum(dim, keepdim=True)
    if ignore_nan:
        return where(nans < n, (n - nans - 1) // 2, 0)
    return where(nans > 0, n - nans, (n - 1) // 2)


def _stable_at(x, dim, position):
    """The indices of the elements at ``position`` (keepdim, per row) of x's stable sort along dim."""
    return argsort_raw(x.detach(), dim, False).gather(dim, position)


def _picked_along(name, x, dim, keepdim, choose):
    """``name``'s (values, indices) along ``dim``; ``choose(x, dim)`` gives each row's index (keepdim)."""
    dim = normalize_dim(dim, x.ndim, name)
    if x.ndim == 0:
        return return_types[name](x.clone(), x.new_zeros((), dtype=dt.int64))
    if x.shape[dim] == 0:
        raise IndexError(f"{name}(): Expected reduction dim {dim} to have non-zero size.")
    indices = choose(x.detach(), dim)
    values = x.gather(dim, indices)
    return return_types[name](*((values, indices) if keepdim else (values.squeeze(dim), indices.squeeze(dim))))


class MedianAll(Function):
    """The median of all elements; its gradient is shared evenly by the elements equal to it (the NaNs when
    it is NaN), as torch's."""

    @staticmethod
    def forward(ctx, x, ignore_nan):
        flat = x.reshape((-1,))
        value = flat.gather(0, _stable_at(flat, 0, _position(flat, 0, ignore_nan))).reshape(())
        ctx.save_for_backward(x, value)
        return value

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        chosen = (x == y) | (x.isnan() & y.isnan())
        return g * chosen / chosen.sum(), None


def _median(name, x, dim, keepdim, ignore_nan):
    if dim is None:
        if x.numel() == 0:
            return full((), math.nan, dtype=x.dtype, device=x.device)
        return MedianAll.apply(x, ignore_nan)
    return _picked_along(name, x, dim, keepdim, lambda rows, d: _stable_at(rows, d, _position(rows, d, ignore_nan)))


@op(samples=lambda t: [
    t.S("median-all", lambda x: x.median(), t.distinct(3, 4)),
    t.S("median-dim", lambda x: median(x, 1).values, t.distinct(3, 4)),
    t.S("median-dim0-keepdim", lambda x: x.median(0, keepdim=True)[0], t.distinct(5, 2))])
def median(x, dim=None, keepdim=False):
    """The lower median (of all elements, or along ``dim`` with its index); NaN where there is a NaN."""
    return _median("median", x, dim, keepdim, False)


@op(samples=lambda t: [
    t.S("nanmedian-all", lambda x: nanmedian(x.masked_fill(t.const([[True, False, False], [False] * 3]),
                                                           math.nan)), t.distinct(2, 3)),
    t.S("nanmedian-dim", lambda x: x.nanmedian(1).values, t.distinct(3, 4))])
def nanmedian(x, dim=None, keepdim=False):
    """median of the values that are not NaN."""
    return _median("nanmedian", x, dim, keepdim, True)


@op(samples=lambda t: [
    t.S("kthvalue", lambda x: kthvalue(x, 2, 1).values, t.distinct(3, 4)),
    t.S("kthvalue-dim0-keepdim", lambda x: x.kthvalue(3, 0, True)[0], t.distinct(4, 2))])
def kthvalue(x, k, dim=-1, keepdim=False):
    """The k-th smallest element along ``dim`` and its index, which among equal values is the one torch's
    quickselect picks (``_quickselect``)."""
    n = x.shape[normalize_dim(dim, x.ndim, "kthvalue")] if x.ndim else 1
    if not 1 <= k <= n:
        raise RuntimeError(f"kthvalue(): selected number k out of range for dimension {dim} (k = {k}, size {n})")
    return _picked_along("kthvalue", x, dim, keepdim, lambda rows, d: _quickselect(
        rows, d, k - 1, _stable_at(rows, d, rows.new_full(_one_along(rows, d), k - 1, dtype=dt.int64))))


def _quickselect(x, dim, k, indices):
    """The indices torch's CPU kthvalue reports, from those of a stable sort (keepdim). torch runs Hoare's
    quickselect with a median-of-three pivot (NaN largest) over each row, so among values equal to the k-th
    it reports whichever its swaps leave at place k: the rows where that value is tied are replayed."""
    chosen = x.gather(dim, indices)
    same = (x == chosen) | (x.isnan() & chosen.isnan())
    return _replayed(x, dim, indices, same.sum(dim, keepdim=True) > 1, lambda row: _replay(row, k))


def _replayed(x, dim, indices, rows, replay):
    """``indices`` (keepdim) with those of the ``rows`` (a keepdim mask) replaced by ``replay(values of the
    row as a list)``, run on the host: torch's own algorithm, replayed where its choice among ties shows."""
    if not bool(rows.any()):
        return indices
    values = x.movedim(dim, -1)._host_values()
    found = indices.movedim(dim, -1)._host_values().copy()
    for place in np.argwhere(rows.movedim(dim, -1)._host_values()):
        found[tuple(place[:-1])] = replay(list(values[tuple(place[:-1])]))
    return from_host_array(found, x.device, dt.int64).movedim(-1, dim)


def _above(a, b):
    return (a != a and b == b) or a > b            # (NaN above all else)


def _replay(values, k):
    """Where torch's quickselect takes the element it leaves at place k of ``values`` (SortingUtils.h)."""
    order = list(range(len(values)))

    def swap(i, j):
        values[i], values[j], order[i], order[j] = values[j], values[i], order[j], order[i]

    lo, hi = 0, len(values) - 1
    while hi > lo + 1:
        mid = (lo + hi) >> 1
        swap(mid, lo + 1)
        for a, b in ((lo + 1, hi), (lo, hi), (lo + 1, lo)):
            if _above(values[a], values[b]):
                swap(a, b)
        i, j, pivot = lo + 1, hi, values[lo]
        while True:
            i += 1
            while _above(pivot, values[i]):
                i += 1
            j -= 1
            while _above(values[j], pivot):
                j -= 1
            if j < i:
                break
            swap(i, j)
        swap(lo, j)
        if j <= k:
            lo = i
        if j >= k:
            hi = j - 1
    if hi == lo + 1 and _above(values[lo], values[hi]):
        swap(lo, hi)
    return order[k]


def _one_along(x, dim):
    return tuple(1 if d == dim else s for d, s in enumerate(x.shape))


def _mode_position(x, dim):
    """Where the mode's last element sits in the stable sort of each row. torch counts the runs of equal
    values in the sorted (value, index) pairs and keeps the first longest run: the smallest of the most
    frequent values, reported by its last index."""
    n = x.shape[dim]
    ordered = x.gather(dim, argsort_raw(x, dim, False))
    if n == 1:
        return ordered.new_zeros(_one_along(x, dim), dtype=dt.int64)
    steps = ordered.narrow(dim, 1, n - 1) != ordered.narrow(dim, 0, n - 1)
    edge = steps.new_ones(_one_along(x, dim))
    starts, ends = cat([edge, steps], dim), cat([steps, edge], dim)
    places = _along(n, dim, x.ndim, x.device)
    first = running(maximum, where(starts, places, 0), dim)
    lengths = where(ends, places - first + 1, 0)
    return lengths.argmax(dim, keepdim=True)


def _mode_indices(x, dim):
    """The indices torch's CPU mode reports (keepdim). It sorts the (value, index) pairs by value alone with
    std::sort: an insertion sort up to 16 elements, stable, so the mode's last index, which the stable sort
    here gives; beyond, an introsort that shuffles ties, and with NaNs (which compare false) an order of its
    own: those rows are replayed (``_std_sort_mode``)."""
    indices = _stable_at(x, dim, _mode_position(x, dim))
    rows = x.isnan().any(dim, keepdim=True)
    if x.shape[dim] > 16:
        rows = rows | ((x == x.gather(dim, indices)).sum(dim, keepdim=True) > 1)
    return _replayed(x, dim, indices, rows, _std_sort_mode)


def _std_sort_mode(values):
    """The index torch's mode reports for ``values``: the last of the first longest run of equal values in
    the order libstdc++'s std::sort (bits/stl_algo.h) leaves the (value, index) pairs compared by value."""
    pairs = [(v, i) for i, v in enumerate(values)]
    _introsort(pairs, 0, len(pairs), 2 * (len(pairs).bit_length() - 1))
    _insertion_sort(pairs, 0, min(len(pairs), 16))
    for i in range(16, len(pairs)):
        _linear_insert(pairs, i)
    best, index, run = 0, 0, 0
    for i, (v, j) in enumerate(pairs):
        run += 1
        if i == len(pairs) - 1 or v != pairs[i + 1][0]:
            if run > best:
                best, index = run, j
            run = 0
    return index


def _introsort(a, first, last, depth):
    """std::__introsort_loop: median-of-three quicksort down to ranges of 16 (left for the insertion sort).
    Its heapsort fallback past ``depth`` levels, which only adversarial orders reach, is not replayed: such
    a range is left to the insertion sort."""
    while last - first > 16 and depth > 0:
        depth -= 1
        mid = first + (last - first) // 2
        x, y, z = first + 1, mid, last - 1
        if a[x][0] < a[y][0]:
            pick = y if a[y][0] < a[z][0] else z if a[x][0] < a[z][0] else x
        else:
            pick = x if a[x][0] < a[z][0] else z if a[y][0] < a[z][0] else y
        a[first], a[pick] = a[pick], a[first]
        lo, hi, pivot = first + 1, last, a[first][0]
        while True:
            while a[lo][0] < pivot:
                lo += 1
            hi -= 1
            while pivot < a[hi][0]:
                hi -= 1
            if not lo < hi:
                break
            a[lo], a[hi] = a[hi], a[lo]
            lo += 1
        _introsort(a, lo, last, depth)
        last = lo


def _insertion_sort(a, first, last):
    for i in range(first + 1, last):
        if a[i][0] < a[first][0]:
            a[first:i + 1] = [a[i]] + a[first:i]
        else:
            _linear_insert(a, i)


def _linear_insert(a, last):
    value = a[last]
    while last > 0 and value[0] < a[last - 1][0]:
        a[last] = a[last - 1]
        last -= 1
    a[last] = value


@op(samples=lambda t: [
    t.S("mode", lambda x: mode(x, 1).values, t.distinct(3, 8)),
    t.S("mode-dim0", lambda x: x.mode(0)[0], t.distinct(4, 3))])
def mode(x, dim=-1, keepdim=False):
    """The most frequent value along ``dim`` (the smallest of several) and the index torch reports for it."""
    return _picked_along("mode", x, dim, keepdim, _mode_indices)


# ----------------------------------------------------------------------------- quantiles
INTERPOLATIONS = ("linear", "lower", "higher", "midpoint", "nearest")


def _quantile_checks(name, x, q, interpolation):
    if not x.dtype.is_floating_point:
        raise RuntimeError(f"{name}() input tensor must be either float or double dtype, got {x.dtype.name}")
    if interpolation not in INTERPOLATIONS:
        raise ValueError(f"{name}() interpolation must be one of {', '.join(INTERPOLATIONS)}. Got "
                         f"'{interpolation}'")
    if hasattr(q, "_layout"):
        if q.ndim > 1:
            raise RuntimeError(f"{name}() q must be a scalar or 1D tensor, got a {q.ndim}-D tensor")
        if q.dtype is not x.dtype:
            raise RuntimeError(f"{name}() q tensor must be same dtype as the input tensor ({x.dtype.name}), "
                               f"got {q.dtype.name}")
        if q.numel() and not bool(((q >= 0) & (q <= 1)).all()):
            raise RuntimeError(f"{name}() q values must be in the range [0, 1]")
        return q
    if not 0 <= q <= 1:
        raise RuntimeError(f"{name}() q must be in the range [0, 1] but got {q}")
    return tensor(q, dtype=x.dtype, device=x.device)


def _ranks(rows, q, interpolation, ignore_nan):
    """Each row's (rows, Q) positions of the quantiles q in its sort, as torch reckons them: q * (count - 1)
    in the input's dtype, count being the row's size (a row with a NaN: its last position, the NaN) or, when
    ``ignore_nan``, its number of other values (none: 0)."""
    nans = rows.isnan().sum(1, keepdim=True)
    if ignore_nan:
        ranks = q * (rows.shape[1] - nans - 1).to(rows.dtype)
        ranks = ranks.masked_fill(ranks < 0, 0)
    else:
        last = rows.shape[1] - 1
        ranks = (q * last).masked_fill(nans > 0, last)
    if interpolation == "lower":
        return ranks.floor()
    if interpolation == "higher":
        return ranks.ceil()
    return ranks.round() if interpolation == "nearest" else ranks


def _quantile(name, x, q, dim, keepdim, interpolation, ignore_nan):
    q = _quantile_checks(name, x, q, interpolation)
    if x.numel() == 0:       # (torch refuses any empty input, whichever dim is empty)
        raise RuntimeError(f"{name}() input tensor must be non-empty")
    if dim is None:
        rows, kept = x.reshape((1, -1)), ((1,) * x.ndim if keepdim else ())
    else:
        dim = normalize_dim(dim, x.ndim, name)
        moved = x.movedim(dim, -1) if x.ndim else x.reshape((1,))
        rows = moved.reshape((-1, moved.shape[-1]))
        kept = tuple(1 if d == dim and keepdim else s for d, s in enumerate(x.shape) if d != dim or keepdim)
    ordered = rows.gather(1, argsort_raw(rows.detach(), 1, False))
    ranks = _ranks(ordered.detach(), q.reshape((1, -1)), interpolation, ignore_nan)
    below = ranks.long()
    values = ordered.gather(1, below.expand(ordered.shape[0], -1))
    if interpolation in ("linear", "midpoint"):
        weights = ranks.new_full(ranks.shape, 0.5) if interpolation == "midpoint" else ranks - below
        above = ordered.gather(1, ranks.ceil().long().expand(ordered.shape[0], -1))
        values = values.lerp(above, weights.expand(values.shape))
    values = values.t().reshape((q.numel(),) + kept)
    return values.reshape(kept) if q.ndim == 0 else values


@op(samples=lambda t: [
    t.S("quantile", lambda x: quantile(x, 0.3, 1), t.distinct(3, 5)),
    t.S("quantile-q-tensor", lambda x: x.quantile(t.const([0.25, 0.9]), 0, keepdim=True), t.distinct(6, 2)),
    t.S("quantile-all-midpoint", lambda x: quantile(x, 0.4, interpolation="midpoint"), t.distinct(3, 3))])
def quantile(x, q, dim=None, keepdim=False, *, interpolation="linear"):
    """The q-th quantiles of all elements or along ``dim`` (q a number or a 1-D tensor, whose quantiles
    then come first), interpolated between the two nearest values as ``interpolation`` says; NaN where
    there is a NaN."""
    return _quantile("quantile", x, q, dim, keepdim, interpolation, False)


@op(samples=lambda t: [
    t.S("nanquantile", lambda x: nanquantile(x.masked_fill(t.const([[True] + [False] * 4] * 3), math.nan),
                                             0.6, 1), t.distinct(3, 5)),
    t.S("nanquantile-lower", lambda x: x.nanquantile(0.7, interpolation="lower"), t.distinct(2, 5))])
def nanquantile(x, q, dim=None, keepdim=False, *, interpolation="linear"):
    """quantile of the values that are not NaN."""
    return _quantile("nanquantile", x, q, dim, keepdim, interpolation, True)


# ----------------------------------------------------------------------------- searches
def _count_below(boundaries, values, right):
    """For each row of ``values``, where torch's binary search over the matching row of ``boundaries`` ends:
    the count of boundaries below each value (right: at most it) when the row is sorted. It steps all values
    at once, halving each one's range per step, with torch's tests: a boundary is passed when it is not >= the
    value (right: not >), so a NaN boundary is passed and a NaN value passes everything."""
    n = boundaries.shape[1]
    start = values.new_zeros(values.shape, dtype=dt.int64)
    if n == 0:
        return start
    end = start + n
    for _ in range(n.bit_length()):
        middle = start + (end - start) // 2
        bound = boundaries.gather(1, middle.clamp(max=n - 1))
        onward = ~(bound > values) if right else ~(bound >= values)
        live = start < end
        start, end = where(live & onward, middle + 1, start), where(live & ~onward, middle, end)
    return start


def _search(name, sequence, values, right, out_int32):
    scalar = not hasattr(values, "_layout")
    if scalar:
        values = tensor(values, device=sequence.device)
    if sequence.ndim == 0:
        raise RuntimeError(f"{name}(): boundaries tensor should have positive dimension, but got 0 dimension")
    common = dt.result_type(sequence, values)
    seq, vals = sequence.detach().to(common), values.detach().to(common)
    if seq.ndim == 1:
        rows_seq, rows_val = seq.reshape((1, -1)), vals.reshape((1, -1))
    elif tuple(seq.shape[:-1]) != tuple(vals.shape[:-1]):
        raise RuntimeError(f"{name}(): boundaries tensor should be 1 dimension or the first N-1 dimensions of "
                           f"boundaries tensor and input value tensor must match, but we got boundaries tensor "
                           f"{list(sequence.shape)} and input value tensor {list(values.shape)}")
    else:
        count = math.prod(seq.shape[:-1])
        rows_seq, rows_val = seq.reshape((count, seq.shape[-1])), vals.reshape((count, vals.shape[-1]))
    found = _count_below(rows_seq, rows_val, right).reshape(values.shape)
    return found.int() if out_int32 else found


@op(method=False, samples=None)
def searchsorted(sorted_sequence, input, *, out_int32=False, right=False, side=None, sorter=None):
    """Where each value would go in the sorted last dim of ``sorted_sequence`` (``sorter``: the order that
    sorts it) to keep it sorted: before equal entries, or after them when ``right`` (or side='right')."""
    if side is not None:
        if side not in ("left", "right"):
            raise RuntimeError(f"searchsorted(): side can only be 'left' or 'right' but got {side!r}")
        if right and side == "left":
            raise RuntimeError("searchsorted(): side and right can't be set to opposites, got side of left "
                               "while right was True")
        right = side == "right"
    if sorter is not None:
        if tuple(sorter.shape) != tuple(sorted_sequence.shape):
            raise RuntimeError(f"searchsorted(): boundary and sorter must have the same size, but got boundary "
                               f"{list(sorted_sequence.shape)} and sorter {list(sorter.shape)}")
        sorted_sequence = sorted_sequence.gather(-1, sorter)
    return _search("searchsorted", sorted_sequence, input, right, out_int32)


@op(method=False, samples=None)
def bucketize(input, boundaries, *, out_int32=False, right=False):
    """The bucket of each value among the sorted 1-D ``boundaries``: i with boundaries[i-1] < v <=
    boundaries[i] (right: boundaries[i-1] <= v < boundaries[i])."""
    if boundaries.ndim != 1:
        raise RuntimeError(f"bucketize(): boundaries tensor must be 1 dimension, but got dim({boundaries.ndim})")
    return _search("bucketize", boundaries, input, right, out_int32)


@op(method=False, samples=None)
def isin(elements, test_elements, *, assume_unique=False, invert=False):
    """Whether each of ``elements`` is among ``test_elements`` (either may be a number): a search of the
    sorted test elements. NaN, as in torch, is among nothing."""
    if not hasattr(elements, "_layout") and not hasattr(test_elements, "_layout"):
        raise TypeError("isin(): expected elements or test_elements to be a tensor")
    like = elements if hasattr(elements, "_layout") else test_elements
    if not hasattr(elements, "_layout"):
        elements = tensor(elements, device=like.device)
    if not hasattr(test_elements, "_layout"):
        test_elements = tensor(test_elements, device=like.device)
    common = dt.result_type(elements, test_elements)
    pool = test_elements.detach().to(common).reshape((-1,))
    pool = pool.gather(0, argsort_raw(pool, 0, False))
    e = elements.detach().to(common)
    if pool.numel() == 0:
        found = e.new_zeros(e.shape, dtype=dt.bool_)
    else:
        # NaNs sort last and would break the search's order: search them as +inf, and since the match is
        # checked on the pool itself, a NaN still equals nothing.
        ordered = where(pool.isnan(), math.inf, pool) if common.is_floating_point else pool
        at = _count_below(ordered.reshape((1, -1)), e.reshape((1, -1)), False).reshape(e.shape)
        found = (at < pool.numel()) & (pool.gather(0, at.clamp(max=pool.numel() - 1).reshape((-1,)))
                                       .reshape(e.shape) == e)
    return ~found if invert else found


@op(samples=None)
def argwhere(x):
    """The indices of the nonzero elements, one row each: nonzero(x)."""
    return nonzero(x)


@op(samples=None)
def nonzero_static(input, *, size, fill_value=-1):
    """nonzero's rows, cut or padded with ``fill_value`` to exactly ``size`` rows."""
    if size < 0:
        raise RuntimeError(f"nonzero_static: 'size' must be a non-negative integer, got {size}")
    found = nonzero(input)
    if found.shape[0] >= size:
        return found.narrow(0, 0, size)
    return cat([found, found.new_full((size - found.shape[0], found.shape[1]), fill_value)], 0)


@op(samples=None)
def unique_consecutive(x, return_inverse=False, return_counts=False, dim=None):
    """x with each run of equal consecutive elements (slices along ``dim``) kept once; NaNs all differ."""
    x = x.detach()
    if dim is None:
        rows, rest = x.reshape((-1, 1)), ()
    else:
        dim = normalize_dim(dim, x.ndim, "unique_consecutive")
        moved = x.movedim(dim, 0)
        rest = tuple(moved.shape[1:])
        rows = moved.reshape((moved.shape[0], math.prod(rest)))
    n = rows.shape[0]
    steps = (rows[1:] != rows[:-1]).any(1)
    starts = cat([steps.new_ones(min(n, 1)), steps])
    group = starts.long().cumsum(0) - 1
    values = rows[starts].reshape((-1,) + rest)
    out = (values if dim is None else values.movedim(0, dim),)
    if return_inverse:
        out += (group.reshape(x.shape) if dim is None else group,)
    if return_counts:
        out += (bincount(group, minlength=int(starts.sum())),)
    return out if len(out) > 1 else out[0]


# ----------------------------------------------------------------------------- histogram
@op(samples=None)
def histogram(input, bins=100, *, range=None, weight=None, density=False):
    """(hist, bin_edges): how many elements (or how much ``weight``) fall in each bin; ``bins`` is a count
    of equal bins over ``range`` (default: the data's, widened by 0.5 each side if it is one point; [0, 1]
    without data) or the
    increasing edges. A bin holds its left edge, the last bin its right one too; values outside are left
    out. ``density`` divides by the total and the bins' widths."""
    if not input.dtype.is_floating_point:
        raise RuntimeError(f"histogram: expected a floating point input, got {input.dtype.name}")
    if weight is not None and tuple(weight.shape) != tuple(input.shape):
        raise RuntimeError(f"histogram: if weight tensor is provided it should have the same shape as the input "
                           f"tensor, but got input with shape {list(input.shape)} and weight with shape "
                           f"{list(weight.shape)}")
    if isinstance(bins, numbers.Integral):
        edges = _even_edges(input, int(bins), range)
    else:
        if bins.ndim != 1 or bins.numel() < 1:
            raise RuntimeError(f"histogram: bins must be a 1-D tensor of edges, got shape {list(bins.shape)}")
        edges = bins.detach().to(input.dtype)
    count = edges.numel() - 1
    flat = input.detach().reshape((-1,))
    slot = _count_below(edges.reshape((1, -1)), flat.reshape((1, -1)), True).reshape((-1,)) - 1
    slot = where(flat == edges[-1], count - 1, slot)
    inside = (slot >= 0) & (slot < count) & (flat >= edges[0]) & (flat <= edges[-1])
    weights = flat.new_ones(flat.shape) if weight is None else weight.detach().reshape((-1,)).to(input.dtype)
    hist = bincount(slot[inside], weights[inside], minlength=count).to(input.dtype)
    if density:
        hist = hist / (hist.sum() * (edges[1:] - edges[:-1]))
    return return_types["histogram"](hist, edges)


def _even_edges(input, bins, span):
    if bins <= 0:
        raise RuntimeError(f"histogram(): bins must be > 0, but got {bins} for dimension 0")
    if span is not None:
        lo, hi = (float(v) for v in span)
    elif input.numel():
        lo, hi = float(amin(input.detach())), float(amax(input.detach()))
    else:
        lo, hi = 0.0, 1.0                               # (torch's range for no data, as numpy's)
    if lo > hi:
        raise ValueError(f"histogram(): max must be larger than min, got min={lo}, max={hi}")
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ValueError(f"histogram(): range of [{lo}, {hi}] is not finite")
    if lo == hi:
        lo, hi = lo - 0.5, hi + 0.5
    return linspace(lo, hi, bins + 1, dtype=input.dtype, device=input.device)
