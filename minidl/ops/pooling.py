"""Pooling in 1, 2 and 3 spatial dims beyond ``conv``'s 2-D ops: max, average, adaptive, Lp and unpooling.

A pooling window is a box, and max and sum over a box are separable: each spatial dim is pooled in
turn, the tensor seen as (before, n, after) and the 2-D primitives run with a (k, 1) window over
that (n, after) plane (``MaxPool2d`` for maxima, ``Im2Col`` then a sum for averages). The position
of a maximum along one dim gathers the positions found in the dims pooled before it, so the
indices come out flat over the input's spatial dims, ties to the first in row-major order, as
PyTorch's loops pick them. Adaptive windows vary in size: their means are one averaging matrix per
dim; their maxima gather each window (padded by repeating its last element) and reduce it, as do
fractional max pooling's windows, placed per plane by torch's formula from one draw per dim.
"""
from __future__ import annotations

import math

import numpy as np

from .. import _dtype as dt
from .autocast_mode import autocast_op
from .conv import Im2Col, MaxPool2d, _adaptive_matrix, _batched, _window_counts, avg_pool2d, max_pool2d, \
    output_sizes
from .conv_nd import ntuple
from .creation import arange, full, rand, tensor, zeros
from .elementwise import div, where
from .registry import op
from .shape_ops import cat


def _pool_args(name, n, kernel_size, stride, padding, dilation=1):
    """Checked (kernel, stride, padding, dilation) tuples of ``n`` ints; stride defaults to the kernel."""
    k = ntuple(kernel_size, n, f"{name}: kernel_size")
    no_stride = stride is None or (isinstance(stride, (list, tuple)) and len(stride) == 0)
    s = k if no_stride else ntuple(stride, n, f"{name}: stride")
    p, d = ntuple(padding, n, f"{name}: padding"), ntuple(dilation, n, f"{name}: dilation")
    if min(k) < 1:
        raise RuntimeError(f"{name}: kernel_size must be greater than zero, but got {k}")
    if min(s) < 1:
        raise RuntimeError(f"{name}: stride must be greater than zero, but got {s}")
    if min(d) < 1:
        raise RuntimeError(f"{name}: dilation must be greater than zero, but got {d}")
    if min(p) < 0 or any(pp > kk // 2 for pp, kk in zip(p, k)):
        raise RuntimeError(f"{name}: pad should be at most half of effective kernel size, but got pad={p}, "
                           f"kernel_size={k} and dilation={d}")
    return k, s, p, d


def _planes(x, dim):
    """x as (before, n, after) around spatial ``dim``: the layout each separable pass works on."""
    return x.reshape(math.prod(x.shape[:dim]), x.shape[dim], math.prod(x.shape[dim + 1:]))


def _separable_max(x, reduce_along, indices):
    """Max over boxes of x (N, C, *spatial), one spatial dim at a time, last first.

    ``reduce_along(planes, i)``: planes (B, n, A) -> (values, positions) (B, o, A), the windows of
    spatial dim ``i``. Returns the maxima and (with ``indices``, else None) their int64 indices flat over
    the spatial dims."""
    sizes = tuple(x.shape[2:])
    flat = None
    for i in reversed(range(len(sizes))):
        dim = 2 + i
        values, pos = reduce_along(_planes(x, dim), i)
        shape = tuple(x.shape[:dim]) + (values.shape[1],) + tuple(x.shape[dim + 1:])
        if indices:
            pos, stride = pos.reshape(shape), math.prod(sizes[i + 1:])
            flat = pos * stride if flat is None else pos * stride + flat.gather(dim, pos)
        x = values.reshape(shape)
    return x, flat


def _max_pool(name, input, spatial, kernel_size, stride, padding, dilation, ceil_mode, return_indices):
    x, unbatched = _batched(name, input, spatial)
    k, s, p, d = _pool_args(name, spatial, kernel_size, stride, padding, dilation)
    o = output_sizes(name, tuple(x.shape[2:]), k, s, p, d, ceil_mode)

    def along(planes, i):
        b, n, a = planes.shape
        values, idx = MaxPool2d.apply(planes.reshape(b, 1, n, a), (k[i], 1, s[i], 1, p[i], 0, d[i], 1, o[i], a))
        return values.reshape(b, o[i], a), idx.reshape(b, o[i], a) // a   # idx: a position in the (n, a) plane

    out, idx = _separable_max(x, along, return_indices)
    if not return_indices:
        return out.squeeze(0) if unbatched else out
    return (out.squeeze(0), idx.squeeze(0)) if unbatched else (out, idx)


def _max_pool_samples(name, spatial, fn):
    def samples(t):
        shape = (2, 2, 5) if spatial == 1 else (1, 2, 3, 4, 3)
        x = t.distinct(*shape)

        def first_backward(g):  # as create_graph records it: linear in g
            leaf = t.const(x).requires_grad_()
            return t.vjp(fn(leaf, 2, stride=1), leaf, g)

        return [
            t.S(name, lambda x: fn(x, 2, stride=1, padding=1), t.distinct(*shape)),
            t.S(f"{name}-ceil-dilation-unbatched", lambda x: fn(x, 2, stride=2, dilation=2, ceil_mode=True),
                t.NC(t.distinct(*((3, 6) if spatial == 1 else (2, 3, 3, 4))), "F")),
            t.S(f"{name}-backward", first_backward, t.rn(*shape[:2], *(n - 1 for n in shape[2:]))),
            t.S(name, lambda x: fn(x, 2, stride=1) ** 2, t.distinct(*shape), second_order=True),
        ]
    return samples


@op(method=False, samples=_max_pool_samples("max_pool1d", 1, lambda *a, **k: max_pool1d(*a, **k)))
def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    return _max_pool("max_pool1d", input, 1, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


@op(method=False, samples=_max_pool_samples("max_pool3d", 3, lambda *a, **k: max_pool3d(*a, **k)))
def max_pool3d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    return _max_pool("max_pool3d", input, 3, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def _divided(total, counts, x):
    """total / counts as PyTorch's average pooling: integer sums divided with truncation."""
    if x.dtype.is_floating_point:
        return total / tensor(counts, dtype=x.dtype, device=x.device)
    return div(total, tensor(counts, device=x.device), rounding_mode="trunc").to(x.dtype)


def _avg_pool(name, input, spatial, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    x, unbatched = _batched(name, input, spatial)
    k, s, p, d = _pool_args(name, spatial, kernel_size, stride, padding)
    sizes = tuple(x.shape[2:])
    o = output_sizes(name, sizes, k, s, p, d, ceil_mode)
    total = x
    for i in reversed(range(spatial)):          # the window sums, one dim at a time (zero padding)
        planes = _planes(total, 2 + i)
        b, n, a = planes.shape
        taps = Im2Col.apply(planes.reshape(b, 1, n, a), (k[i], 1, s[i], 1, p[i], 0, 1, 1, o[i], a))
        total = taps.sum(1).reshape(tuple(total.shape[:2 + i]) + (o[i],) + tuple(total.shape[3 + i:]))
    if divisor_override:
        counts = np.array(divisor_override)
    else:
        counts = np.ones(())
        for n, kk, ss, pp, oo in zip(sizes, k, s, p, o):
            counts = np.multiply.outer(counts, _window_counts(n, kk, ss, pp, oo, count_include_pad))
    out = _divided(total, counts, x)
    return out.squeeze(0) if unbatched else out


@op(method=False, samples=lambda t: [
    t.S("avg_pool1d", lambda x: avg_pool1d(x, 3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
        t.rn(2, 2, 6)),
    t.S("avg_pool1d-unbatched", lambda x: avg_pool1d(x, 2), t.NC(t.rn(3, 5), "F"))])
@autocast_op("avg_pool1d")
def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    return _avg_pool("avg_pool1d", input, 1, kernel_size, stride, padding, ceil_mode, count_include_pad, None)


@op(method=False, namespace="nn.functional", samples=lambda t: [
    t.S("avg_pool3d", lambda x: avg_pool3d(x, (2, 3, 2), stride=(1, 2, 2), padding=1, ceil_mode=True),
        t.rn(1, 2, 3, 5, 4)),
    t.S("avg_pool3d-exclude-pad", lambda x: avg_pool3d(x, 2, stride=1, padding=1, count_include_pad=False),
        t.rn(1, 1, 2, 3, 2)),
    t.S("avg_pool3d-divisor-unbatched", lambda x: avg_pool3d(x, 2, divisor_override=3), t.NC(t.rn(2, 2, 4, 3), "F"))])
@autocast_op("avg_pool3d")
def avg_pool3d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    return _avg_pool("avg_pool3d", input, 3, kernel_size, stride, padding, ceil_mode, count_include_pad,
                     divisor_override)


# ----------------------------------------------------------------------------- adaptive pooling
def _adaptive_sizes(name, sizes, output_size):
    """The output sizes for spatial input ``sizes`` (None: the input's), checked."""
    spatial = len(sizes)
    if isinstance(output_size, (list, tuple)):
        if len(output_size) != spatial:
            raise RuntimeError(f"{name}: output_size must have {spatial} elements, got {list(output_size)}")
        out = tuple(n if v is None else int(v) for n, v in zip(sizes, output_size))
    else:
        out = (int(output_size),) * spatial
    if min(out) < 0 or 0 in sizes:
        raise RuntimeError(f"{name}: invalid output size {out} for an input of spatial size {sizes}")
    return out


def _adaptive_avg(name, input, spatial, output_size):
    x, unbatched = _batched(name, input, spatial)
    if not x.dtype.is_floating_point:
        raise NotImplementedError(f"{name}: not implemented for {x.dtype.name} input (as in PyTorch)")
    for i, o in reversed(list(enumerate(_adaptive_sizes(name, tuple(x.shape[2:]), output_size)))):
        planes = _planes(x, 2 + i)                             # (B, n, A): the windows' means are M @ planes
        m = tensor(_adaptive_matrix(planes.shape[1], o), dtype=x.dtype, device=x.device)
        x = (m @ planes).reshape(tuple(x.shape[:2 + i]) + (o,) + tuple(x.shape[3 + i:]))
    return x.squeeze(0) if unbatched else x


@op(method=False, samples=lambda t: [
    t.S("adaptive_avg_pool1d", lambda x: adaptive_avg_pool1d(x, 3), t.rn(2, 2, 7)),
    t.S("adaptive_avg_pool1d-unbatched", lambda x: adaptive_avg_pool1d(x, 4), t.NC(t.rn(3, 5), "F"))])
@autocast_op("adaptive_avg_pool1d")
def adaptive_avg_pool1d(input, output_size):
    return _adaptive_avg("adaptive_avg_pool1d", input, 1, output_size)


@op(method=False, namespace="nn.functional", samples=lambda t: [
    t.S("adaptive_avg_pool3d", lambda x: adaptive_avg_pool3d(x, (2, None, 3)), t.rn(1, 2, 3, 2, 5)),
    t.S("adaptive_avg_pool3d-unbatched", lambda x: adaptive_avg_pool3d(x, 2), t.NC(t.rn(2, 3, 4, 3), "F"))])
@autocast_op("adaptive_avg_pool3d")
def adaptive_avg_pool3d(input, output_size):
    return _adaptive_avg("adaptive_avg_pool3d", input, 3, output_size)


def _adaptive_windows(n, o):
    """(o, K) positions of each adaptive window (torch's start = floor(i*n/o), end = ceil((i+1)*n/o)),
    short windows padded with their last position, and the windows' starts."""
    start = (np.arange(o) * n) // o
    end = -(-((np.arange(o) + 1) * n) // o)
    width = int((end - start).max()) if o else 1
    return np.minimum(start[:, None] + np.arange(width), end[:, None] - 1), start


def _adaptive_max(name, input, spatial, output_size, return_indices):
    x, unbatched = _batched(name, input, spatial)
    if not x.dtype.is_floating_point:
        raise NotImplementedError(f"{name}: not implemented for {x.dtype.name} input (as in PyTorch)")
    o = _adaptive_sizes(name, tuple(x.shape[2:]), output_size)

    def along(planes, i):
        b, n, a = planes.shape
        positions, start = _adaptive_windows(n, o[i])
        windows = planes.index_select(1, tensor(positions.reshape(-1), device=x.device))
        values, arg = windows.reshape(b, o[i], positions.shape[1], a).max(2)
        return values, arg + tensor(start.reshape(o[i], 1), device=x.device)

    out, idx = _separable_max(x, along, return_indices)
    if not return_indices:
        return out.squeeze(0) if unbatched else out
    return (out.squeeze(0), idx.squeeze(0)) if unbatched else (out, idx)


def _adaptive_max_samples(name, shape, size, fn):
    return lambda t: [
        t.S(name, lambda x: fn(x, size), t.distinct(*shape)),
        t.S(f"{name}-indices-unbatched", lambda x: fn(x, size, return_indices=True)[0],
            t.NC(t.distinct(*shape[1:]), "F")),
    ]


@op(method=False, samples=_adaptive_max_samples("adaptive_max_pool1d", (2, 2, 7), 3,
                                                 lambda *a, **k: adaptive_max_pool1d(*a, **k)))
def adaptive_max_pool1d(input, output_size, return_indices=False):
    return _adaptive_max("adaptive_max_pool1d", input, 1, output_size, return_indices)


@op(method=False, namespace="nn.functional", samples=_adaptive_max_samples(
    "adaptive_max_pool2d", (1, 2, 5, 4), (3, None), lambda *a, **k: adaptive_max_pool2d(*a, **k)))
def adaptive_max_pool2d(input, output_size, return_indices=False):
    return _adaptive_max("adaptive_max_pool2d", input, 2, output_size, return_indices)


@op(method=False, namespace="nn.functional", samples=_adaptive_max_samples(
    "adaptive_max_pool3d", (1, 2, 3, 4, 5), (2, 3, 2), lambda *a, **k: adaptive_max_pool3d(*a, **k)))
def adaptive_max_pool3d(input, output_size, return_indices=False):
    return _adaptive_max("adaptive_max_pool3d", input, 3, output_size, return_indices)


# ----------------------------------------------------------------------------- Lp pooling
def _lp_pool(name, input, spatial, norm_type, kernel_size, stride, ceil_mode):
    """torch's formula: (sign(a) * relu(|a|) * prod(kernel)) ** (1/p) for a = avg_pool(x ** p), the
    infinite norms as max pooling of |x|."""
    max_pool, avg_pool = _POOLS[spatial]
    if norm_type == math.inf:
        return max_pool(input.abs(), kernel_size, stride, 0, 1, ceil_mode)
    if norm_type == -math.inf:
        return -max_pool(-input.abs(), kernel_size, stride, 0, 1, ceil_mode)
    out = avg_pool(input.pow(norm_type), kernel_size, stride, 0, ceil_mode)
    k = ntuple(kernel_size, spatial, f"{name}: kernel_size")
    out = where(out == 0, 0.0, out)   # (torch's sign(a) * relu(|a|) is a, yet its relu stops the root's infinite
    return (out * math.prod(k)).pow(1.0 / norm_type)   # gradient at a = 0; so does this where)


@op(method=False, namespace="nn.functional", samples=lambda t: [
    t.S("lp_pool1d", lambda x: lp_pool1d(x, 2, 3, stride=2, ceil_mode=True), t.pos(2, 2, 6)),
    t.S("lp_pool1d-p3-unbatched", lambda x: lp_pool1d(x, 3, 2), t.NC(t.pos(3, 5), "F"))])
def lp_pool1d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    return _lp_pool("lp_pool1d", input, 1, norm_type, kernel_size, stride, ceil_mode)


@op(method=False, namespace="nn.functional", samples=lambda t: [
    t.S("lp_pool2d", lambda x: lp_pool2d(x, 2, (2, 3), stride=(1, 2)), t.pos(1, 2, 4, 5)),
    t.S("lp_pool2d-inf", lambda x: lp_pool2d(x, math.inf, 2), t.NC(t.distinct(2, 4, 4), "F"))])
def lp_pool2d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    return _lp_pool("lp_pool2d", input, 2, norm_type, kernel_size, stride, ceil_mode)


@op(method=False, namespace="nn.functional", samples=lambda t: [
    t.S("lp_pool3d", lambda x: lp_pool3d(x, 1.5, 2, stride=1), t.pos(1, 2, 3, 3, 4)),
    t.S("lp_pool3d-ceil-unbatched", lambda x: lp_pool3d(x, 2, 2, ceil_mode=True), t.NC(t.pos(2, 3, 3, 3), "F"))])
def lp_pool3d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    return _lp_pool("lp_pool3d", input, 3, norm_type, kernel_size, stride, ceil_mode)


_POOLS = {1: (max_pool1d, avg_pool1d), 2: (max_pool2d, avg_pool2d), 3: (max_pool3d, avg_pool3d)}


# ----------------------------------------------------------------------------- max unpooling
def _unpool_size(name, x, spatial, kernel_size, stride, padding, output_size):
    """torch's _unpool_output_size: the default (n-1)*s + k - 2p per dim, or output_size checked."""
    k, p = ntuple(kernel_size, spatial, f"{name}: kernel_size"), ntuple(padding, spatial, f"{name}: padding")
    s = k if stride is None else ntuple(stride, spatial, f"{name}: stride")
    sizes = tuple(x.shape[-spatial:])
    default = [(n - 1) * ss + kk - 2 * pp for n, kk, ss, pp in zip(sizes, k, s, p)]
    if output_size is None:
        return tuple(default)
    output_size = [int(v) for v in output_size]
    if len(output_size) == spatial + 2:
        output_size = output_size[2:]
    if len(output_size) != spatial:
        raise ValueError(f"output_size should be a sequence containing {spatial} or {spatial + 2} elements, but "
                         f"it has a length of '{len(output_size)}'")
    for i, (want, dflt, ss) in enumerate(zip(output_size, default, s)):
        if not dflt - ss < want < dflt + ss:
            raise ValueError(f'invalid output_size "{output_size}" (dim {i} must be between {dflt - ss} and '
                             f'{dflt + ss})')
    return tuple(output_size)


def _max_unpool(name, input, indices, spatial, kernel_size, stride, padding, output_size):
    x, unbatched = _batched(name, input, spatial)
    if indices.dtype is not dt.int64 or tuple(indices.shape) != tuple(input.shape):
        raise RuntimeError(f"{name}: expected indices of dtype int64 and the input's shape {list(input.shape)}, "
                           f"got {indices.dtype.name} {list(indices.shape)}")
    size = _unpool_size(name, x, spatial, kernel_size, stride, padding, output_size)
    n, c = x.shape[0], x.shape[1]
    plane = math.prod(size)
    pooled = math.prod(x.shape[2:])
    idx = indices.reshape(n * c, pooled)
    low, high = (int(idx.min()), int(idx.max())) if idx.numel() else (0, -1)   # (one look each at the device)
    if low < 0 or high >= plane:
        bad = low if low < 0 else high
        raise RuntimeError(f"{name}: Found an invalid max index: {bad} (output volumes are of size "
                           f"{'x'.join(str(v) for v in size)})")
    out = zeros(n * c, plane, dtype=x.dtype, device=x.device).scatter(1, idx, x.reshape(n * c, pooled))
    out = out.reshape((n, c) + size)
    return out.squeeze(0) if unbatched else out


def _max_unpool_samples(name, spatial, fn):
    def samples(t):  # indices of non-overlapping windows: no place written twice
        x = tensor(t.distinct(*(2, 2) + (4,) * spatial))
        idx = _POOLS[spatial][0](x, 2, return_indices=True)[1].numpy()
        pooled = (2, 2) + (2,) * spatial
        return [
            t.S(name, lambda v: fn(v, t.const(idx), 2), t.rn(*pooled)),
            t.S(f"{name}-output-size-unbatched", lambda v: fn(v, t.const(idx[0]), 2, output_size=(5,) * spatial),
                t.NC(t.rn(*pooled[1:]), "F")),
        ]
    return samples


@op(method=False, namespace="nn.functional", samples=_max_unpool_samples(
    "max_unpool1d", 1, lambda *a, **k: max_unpool1d(*a, **k)))
def max_unpool1d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    return _max_unpool("max_unpool1d", input, indices, 1, kernel_size, stride, padding, output_size)


@op(method=False, namespace="nn.functional", samples=_max_unpool_samples(
    "max_unpool2d", 2, lambda *a, **k: max_unpool2d(*a, **k)))
def max_unpool2d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    return _max_unpool("max_unpool2d", input, indices, 2, kernel_size, stride, padding, output_size)


@op(method=False, namespace="nn.functional", samples=_max_unpool_samples(
    "max_unpool3d", 3, lambda *a, **k: max_unpool3d(*a, **k)))
def max_unpool3d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    return _max_unpool("max_unpool3d", input, indices, 3, kernel_size, stride, padding, output_size)


# ----------------------------------------------------------------------------- fractional max pooling
def _fractional_starts(u, n, k, o):
    """torch's generate_intervals for samples ``u`` (N, C): each plane's window starts (N, C, o),
    int((i + u) * alpha) - int(u * alpha) with alpha = (n - k) / (o - 1), the last window at n - k, in u's
    dtype as torch computes them."""
    last = full(tuple(u.shape) + (1,), n - k, dtype=dt.int64, device=u.device)
    if o == 1:
        return last
    alpha = float(np.array(n - k, u.dtype.np) / np.array(o - 1, u.dtype.np))
    i = arange(o - 1, dtype=u.dtype, device=u.device)
    starts = ((i + u.unsqueeze(-1)) * alpha).to(dt.int64) - (u * alpha).to(dt.int64).unsqueeze(-1)
    return cat([starts, last], -1)


def _fractional_max(name, input, spatial, kernel_size, output_size, output_ratio, return_indices, samples):
    x, unbatched = _batched(name, input, spatial)
    if not x.dtype.is_floating_point:
        raise NotImplementedError(f"{name}: not implemented for {x.dtype.name} input (as in PyTorch)")
    k, sizes = ntuple(kernel_size, spatial, f"{name}: kernel_size"), tuple(x.shape[2:])
    if output_size is None:
        if output_ratio is None:
            raise ValueError(f"{name} requires specifying either an output_size or an output_ratio")
        ratio = tuple(output_ratio) if isinstance(output_ratio, (list, tuple)) else (output_ratio,) * spatial
        if len(ratio) != spatial:
            raise ValueError(f"{name} requires output_ratio to either be a single Int or tuple of Ints.")
        output_size = [int(n * r) for n, r in zip(sizes, ratio)]
    o = ntuple(output_size, spatial, f"{name}: output_size")
    for n, kk, oo, what in zip(sizes, k, o, ("time", "height", "width")[3 - spatial:]):
        if oo + kk - 1 > n:
            raise RuntimeError(f"{name}(): pool {what} {kk} too large relative to input {what} {n}")
    n_batch, c = x.shape[0], x.shape[1]
    if samples is None:
        samples = rand(n_batch, c, spatial, dtype=x.dtype, device=x.device)
    if tuple(samples.shape) != (n_batch, c, spatial):
        raise RuntimeError(f"{name}: expected _random_samples of shape {[n_batch, c, spatial]}, got "
                           f"{list(samples.shape)}")
    # torch's samples run (W, H) in 2-D but (T, H, W) in 3-D
    order = (1, 0) if spatial == 2 else (0, 1, 2)

    def along(planes, i):
        b, n, a = planes.shape
        starts = _fractional_starts(samples[:, :, order[i]], n, k[i], o[i])          # (N, C, o)
        before = math.prod(sizes[:i])                                  # the (not yet pooled) spatial dims before i
        starts = starts.reshape(n_batch, c, 1, o[i]).expand(n_batch, c, before, o[i]).reshape(b, o[i], 1)
        taps = (starts + arange(k[i], device=x.device)).reshape(b, o[i] * k[i], 1).expand(b, o[i] * k[i], a)
        values, arg = planes.gather(1, taps).reshape(b, o[i], k[i], a).max(2)
        return values, arg + starts

    out, idx = _separable_max(x, along, return_indices)
    if not return_indices:
        return out.squeeze(0) if unbatched else out
    return (out.squeeze(0), idx.squeeze(0)) if unbatched else (out, idx)


def _fractional_samples(name, shape, size, fn):
    def samples(t):
        spatial = len(shape) - 2
        u = t.uniform(0.0, 1.0, shape[0], shape[1], spatial)
        return [
            t.S(name, lambda x: fn(x, 2, output_size=size, _random_samples=t.const(u)), t.distinct(*shape)),
            t.S(f"{name}-ratio-indices-unbatched",
                lambda x: fn(x, (2, 1, 2)[:spatial], output_ratio=0.5, return_indices=True,
                             _random_samples=t.const(u[:1]))[0], t.NC(t.distinct(*shape[1:]), "F")),
        ]
    return samples


@op(method=False, namespace="nn.functional", samples=_fractional_samples(
    "fractional_max_pool2d", (2, 2, 6, 5), (3, 2), lambda *a, **k: fractional_max_pool2d(*a, **k)))
def fractional_max_pool2d(input, kernel_size, output_size=None, output_ratio=None, return_indices=False,
                          _random_samples=None):
    """Max over windows of ``kernel_size`` placed at pseudo-random fractional strides (Graham, 2014): one
    draw in [0, 1) per plane and spatial dim (``_random_samples``, (N, C, 2), else drawn) fixes the starts."""
    return _fractional_max("fractional_max_pool2d", input, 2, kernel_size, output_size, output_ratio,
                           return_indices, _random_samples)


@op(method=False, namespace="nn.functional", samples=_fractional_samples(
    "fractional_max_pool3d", (1, 2, 4, 5, 6), (2, 3, 2), lambda *a, **k: fractional_max_pool3d(*a, **k)))
def fractional_max_pool3d(input, kernel_size, output_size=None, output_ratio=None, return_indices=False,
                          _random_samples=None):
    """fractional_max_pool2d in three spatial dims (``_random_samples`` (N, C, 3), in (T, H, W) order)."""
    return _fractional_max("fractional_max_pool3d", input, 3, kernel_size, output_size, output_ratio,
                           return_indices, _random_samples)
