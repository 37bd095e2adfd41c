"""Reductions and scans: sum, prod, amax/amin, max/min with indices, argmax/argmin,
cumsum/cumprod, softmax/log_softmax, and the composites built on them."""
from __future__ import annotations

import math
from collections import namedtuple

import numpy as np

from .. import _dtype as dt
from ..autograd import Function
from ..layout import normalize_dim, normalize_dims, reduced_shape
from . import views
from .autocast_mode import autocast_op
from .core import buf, cast, from_host_array, grad_enabled, kernel, new_like_shape, packed_buffer
from .creation import arange
from .elementwise import maximum, minimum, where
from .shape_ops import cat
from .registry import op

return_types = {op: namedtuple(op, ["values", "indices"]) for op in ("max", "min")}


def reduce_raw(op: str, x, dims, keepdim: bool, result_dtype):
    """The ``reduce`` primitive over ``dims``; result in ``result_dtype``, no autograd."""
    compute = dt.arithmetic_dtype(result_dtype)
    if x.dtype.is_floating_point and result_dtype.category == 1:
        x = cast(x, result_dtype)  # floats become the integer dtype by the copy rule, as in PyTorch
    xc = cast(x, compute)
    out = new_like_shape(reduced_shape(x.shape, dims, keepdim), compute, x)
    kernel("reduce", x)(op, buf(xc), xc._layout, dims, buf(out))
    return cast(out, result_dtype)


def _dims(x, dim, op):
    return normalize_dims(dim if dim not in ((), []) else None, x.ndim, op)


def _expand_back(g, x, dims, keepdim):
    """Broadcast a reduced gradient back over the reduced dims of ``x``."""
    return views.unreduce(g, x.shape, dims, keepdim)


def _sum_dtype(x, dtype):
    if dtype is not None:
        return dt.to_dtype(dtype)
    return x.dtype if x.dtype.is_floating_point else dt.int64


class Sum(Function):
    @staticmethod
    def forward(ctx, x, dims, keepdim, dtype):
        ctx.meta = (x.shape, dims, keepdim)
        return reduce_raw("sum", x, dims, keepdim, dtype)

    @staticmethod
    def backward(ctx, g):
        shape, dims, keepdim = ctx.meta
        return views.unreduce(g, shape, dims, keepdim), None, None, None


@op(samples=lambda t: [
    t.S("sum-all", lambda x: x.sum(), t.rn(3, 4)),
    t.S("sum-dim", lambda x: x.sum(1), t.NC(t.rn(3, 4), "F")),
    t.S("sum-dims-keepdim", lambda x: x.sum((0, 2), keepdim=True), t.rn(2, 3, 4)),
    t.S("sum-negdim", lambda x: sum(x, -1), t.NC(t.rn(3, 4), "neg")),
    # Unreduce, Sum's backward: a reduced tensor broadcast back over the reduced dims
    t.S("unreduce-keepdim", lambda x: views.unreduce(x, (3, 4), (1,), True), t.rn(3, 1)),
    t.S("unreduce", lambda x: views.unreduce(x, (2, 3, 4), (0, 2), False), t.rn(3)),
    t.S("sum", lambda x: (x.sum(1) ** 2), t.rn(3, 2), second_order=True)])
@autocast_op("sum")
def sum(x, dim=None, keepdim=False, dtype=None):
    return Sum.apply(x, _dims(x, dim, "sum"), keepdim, _sum_dtype(x, dtype))


@op(samples=lambda t: [
    t.S("mean-all", lambda x: x.mean(), t.rn(3, 4)),
    t.S("mean-dim-keepdim", lambda x: mean(x, 1, keepdim=True), t.NC(t.rn(3, 4), "F"))])
def mean(x, dim=None, keepdim=False, dtype=None):
    result = dt.to_dtype(dtype) if dtype is not None else x.dtype
    if not result.is_floating_point:
        raise RuntimeError(f"mean(): could not infer output dtype. Input dtype must be either a floating "
                           f"point or complex dtype. Got: {x.dtype.name}")
    dims = _dims(x, dim, "mean")
    count = math.prod(x.shape[d] for d in dims)
    return sum(x, dims, keepdim, result) / count if count else sum(x, dims, keepdim, result) * math.nan


class Prod(Function):
    @staticmethod
    def forward(ctx, x, dims, keepdim, dtype):
        y = reduce_raw("prod", x, dims, keepdim, dtype)
        ctx.save_for_backward(x, y)
        ctx.meta = (dims, keepdim)
        return y

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        dims, keepdim = ctx.meta
        g, y = _expand_back(g, x, dims, keepdim), _expand_back(y, x, dims, keepdim)
        if bool((x == 0).any()):
            return g * _prod_of_others(x, dims), None, None, None
        return g * y / x, None, None, None


def _prod_of_others(x, dims):
    """For each element, the product of the other elements of its reduction (zeros allowed)."""
    flat_dims = tuple(d for d in range(x.ndim) if d not in dims) + tuple(dims)
    moved = x.permute(flat_dims)
    kept = moved.shape[:x.ndim - len(dims)]
    rows = moved.reshape(tuple(kept) + (-1,))
    ones = rows.new_ones(tuple(kept) + (1,))
    left = cat_last(ones, rows[..., :-1]).cumprod(-1)
    right = cat_last(ones, rows.flip(-1)[..., :-1]).cumprod(-1).flip(-1)
    inverse = [0] * x.ndim
    for i, d in enumerate(flat_dims):
        inverse[d] = i
    return (left * right).reshape(moved.shape).permute(inverse)


def cat_last(a, b):
    return cat([a, b], -1)


@op(samples=lambda t: [
    t.S("prod-all", lambda x: x.prod(), t.pos(2, 3)),
    t.S("prod-dim", lambda x: x.prod(1), t.NC(t.pos(3, 4), "F")),
    t.S("prod-keepdim", lambda x: x.prod(0, keepdim=True), t.rn(3, 4)),
    t.S("prod-zeros", lambda x: x.prod(1), t.zeros_at(t.pos(3, 4), (0, 1), (2, 0), (2, 3))),
    t.S("prod-zeros", lambda x: x.prod(1), t.zeros_at(t.pos(3, 4), (0, 1), (2, 0), (2, 3)), second_order=True)])
@autocast_op("prod")
def prod(x, dim=None, keepdim=False, dtype=None):
    return Prod.apply(x, _dims(x, dim, "prod"), keepdim, _sum_dtype(x, dtype))


class Extreme(Function):
    """amax / amin; the gradient is shared evenly between tied extremes, as in PyTorch."""

    @staticmethod
    def forward(ctx, x, op, dims, keepdim):
        if 0 in [x.shape[d] for d in dims]:
            raise RuntimeError(f"{op}(): Expected reduction dim {[d for d in dims if not x.shape[d]][0]} to have "
                               f"non-zero size.")
        y = reduce_raw("max" if op == "amax" else "min", x, dims, keepdim, x.dtype)
        ctx.save_for_backward(x, y)
        ctx.meta = (dims, keepdim)
        return y

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        dims, keepdim = ctx.meta
        mask = x == _expand_back(y, x, dims, keepdim)
        count = mask.sum(dims, keepdim=True)
        return _expand_back(g, x, dims, keepdim) * mask / count, None, None, None


@op(samples=lambda t: [t.S("amax-dim", lambda x: x.amax(1), t.distinct(3, 4))])
def amax(x, dim=None, keepdim=False):
    return Extreme.apply(x, "amax", _dims(x, dim, "amax"), keepdim)


@op(samples=lambda t: [t.S("amin-dims-keepdim", lambda x: x.amin((0, 2), keepdim=True), t.distinct(2, 3, 4))])
def amin(x, dim=None, keepdim=False):
    return Extreme.apply(x, "amin", _dims(x, dim, "amin"), keepdim)


def arg_raw(op, x, dim, keepdim):
    if x.shape[dim] == 0 if x.ndim else False:
        raise IndexError(f"{op}(): Expected reduction dim {dim} to have non-zero size.")
    xc = cast(x, dt.arithmetic_dtype(x.dtype))
    if x.ndim == 0:
        xc = xc.reshape((1,))
    out = new_like_shape(reduced_shape(xc.shape, (dim,), keepdim), dt.int64, x)
    kernel("arg_reduce", x)(op, buf(xc), xc._layout, dim, buf(out))
    return out.reshape(reduced_shape(x.shape, (dim,), keepdim)) if x.ndim == 0 else out


@op()
def argmax(x, dim=None, keepdim=False):
    if dim is None:
        return arg_raw("argmax", x.reshape(-1), 0, False).reshape((1,) * x.ndim if keepdim else ())
    return arg_raw("argmax", x, normalize_dim(dim, x.ndim, "argmax"), keepdim)


@op()
def argmin(x, dim=None, keepdim=False):
    if dim is None:
        return arg_raw("argmin", x.reshape(-1), 0, False).reshape((1,) * x.ndim if keepdim else ())
    return arg_raw("argmin", x, normalize_dim(dim, x.ndim, "argmin"), keepdim)


class ExtremeDim(Function):
    """max/min along one dim, returning (values, indices); the gradient goes to the chosen index."""

    @staticmethod
    def forward(ctx, x, op, dim, keepdim):
        indices = arg_raw("argmax" if op == "max" else "argmin", x, dim, True)
        values = x.gather(dim, indices) if x.ndim else x.clone()
        if not keepdim:
            values, indices = values.squeeze(dim), indices.squeeze(dim)
        ctx.mark_non_differentiable(indices)
        ctx.set_materialize_grads(False)                                     # no zeros for the indices' gradient
        ctx.save_for_backward(indices)
        ctx.meta = (x.shape, dim, keepdim)
        return values, indices

    @staticmethod
    def backward(ctx, g, _):
        (indices,) = ctx.saved_tensors
        shape, dim, keepdim = ctx.meta
        if not len(shape):
            return g, None, None, None
        if not keepdim:
            g, indices = g.unsqueeze(dim), indices.unsqueeze(dim)
        return g.new_zeros(shape).scatter(dim, indices, g), None, None, None


def _extreme(op, reduce_all, elementwise):
    def fn(x, dim=None, keepdim=False):
        if dim is None:
            return reduce_all(x)
        if hasattr(dim, "_layout"):
            return elementwise(x, dim)
        values, indices = ExtremeDim.apply(x, op, normalize_dim(dim, x.ndim, op), keepdim)
        return return_types[op](values, indices)
    fn.__name__ = op
    return fn


max = op("max", samples=lambda t: [
    t.S("max-all", lambda x: x.max(), t.NC(t.distinct(3, 4), "F")),
    t.S("max-dim", lambda x: x.max(1).values, t.distinct(3, 4)),
    t.S("max-dim-0d", lambda x: x.max(0)[0], t.rn()),
])(_extreme("max", amax, maximum))
min = op("min", samples=lambda t: [
    t.S("min-all", lambda x: min(x), t.distinct(5)),
    t.S("min-dim-keepdim", lambda x: min(x, 0, keepdim=True), t.NC(t.distinct(3, 4), "F")),
])(_extreme("min", amin, minimum))


def _var_mean(x, dim, unbiased, keepdim, correction, op):
    """(variance, mean) over ``dim``, dividing by count - correction (by default 1: unbiased)."""
    if isinstance(dim, bool):  # var(x, False): unbiased given in dim's place, as PyTorch allows
        dim, unbiased = None, dim
    if correction is None:
        correction = 1 if unbiased is None or unbiased else 0
    dims = _dims(x, dim, op)
    count = math.prod(x.shape[d] for d in dims)
    m = mean(x, dims, keepdim=True)
    centered = x - m
    # no degrees of freedom left: divide by 0 (nan/inf), as PyTorch does
    v = sum(centered * centered, dims, keepdim) / (count - correction if count > correction else 0)
    return v, (m if keepdim or not dims else m.squeeze(dims))


@op(samples=lambda t: [
    t.S("var", lambda x: x.var(), t.rn(3, 4)),
    t.S("var-dim-biased", lambda x: x.var(1, unbiased=False, keepdim=True), t.rn(3, 4)),
    t.S("var-correction", lambda x: var(x, 0, correction=2), t.NC(t.rn(5, 3), "F"))])
@autocast_op("var")
def var(x, dim=None, unbiased=None, keepdim=False, correction=None):
    return _var_mean(x, dim, unbiased, keepdim, correction, "var")[0]


@op(samples=lambda t: [
    t.S("std", lambda x: x.std(), t.rn(3, 4)),
    t.S("std-dim", lambda x: std(x, 1), t.rn(3, 4))])
@autocast_op("std")
def std(x, dim=None, unbiased=None, keepdim=False, correction=None):
    return _safe_pow(var(x, dim, unbiased, keepdim, correction), 0.5)


@op(method=False, samples=lambda t: [t.S("var_mean", lambda x: var_mean(x, 1, correction=0), t.rn(3, 4))])
@autocast_op("var_mean")
def var_mean(x, dim=None, unbiased=None, keepdim=False, correction=None):
    return _var_mean(x, dim, unbiased, keepdim, correction, "var_mean")


@op(method=False, samples=lambda t: [
    t.S("std_mean", lambda x: std_mean(x, (0, 2), keepdim=True), t.NC(t.rn(2, 3, 4), "gap"))])
@autocast_op("std_mean")
def std_mean(x, dim=None, unbiased=None, keepdim=False, correction=None):
    v, m = _var_mean(x, dim, unbiased, keepdim, correction, "std_mean")
    return _safe_pow(v, 0.5), m


@op(samples=lambda t: [
    t.S("logsumexp", lambda x: x.logsumexp(1), t.rn(3, 4)),
    t.S("logsumexp-dims", lambda x: logsumexp(x, (0, 2), keepdim=True), t.NC(t.rn(2, 3, 4), "gap"))])
@autocast_op("logsumexp")
def logsumexp(x, dim, keepdim=False):
    x = _softmax_input(x, None)  # (integers in the default float dtype, as torch's: x - max must not wrap)
    dims = _dims(x, dim, "logsumexp")
    # (an empty reduction has no max to shift by: its sum of exps is 0, its logsumexp -inf)
    m = amax(x, dims, keepdim=True).detach() if x.numel() else x.new_zeros(reduced_shape(x.shape, dims, True))
    m = m.masked_fill(m.abs() == math.inf, 0)
    out = (x - m).exp().sum(dims, keepdim=True).log() + m
    return out if keepdim else out.squeeze(dims)


@op(samples=lambda t: [
    t.S("norm-fro", lambda x: x.norm(), t.rn(3, 4)),
    t.S("norm-2-dim", lambda x: norm(x, 2, 1), t.rn(3, 4)),
    t.S("norm-1", lambda x: x.norm(1), t.nonzero(3, 4)),
    t.S("norm-3", lambda x: x.norm(3, dim=0), t.nonzero(3, 4)),
    t.S("norm-inf", lambda x: x.norm(float("inf"), dim=1), t.distinct(3, 4) + 0.01),
    t.S("norm-nuc", lambda x: x.norm("nuc"), t.rn(3, 4)),
    t.S("norm-std", lambda x: x.norm(dim=1) + x.std(1), t.rn(2, 3), second_order=True)])
@autocast_op("norm")
def norm(x, p="fro", dim=None, keepdim=False, dtype=None):
    if dtype is not None:
        x = x.to(dtype)
    if p == "nuc":
        return _nuclear_norm(x, dim, keepdim)
    dims = _dims(x, dim, "norm")
    if p in ("fro", 2, 2.0):
        return _safe_pow(sum(x * x, dims, keepdim), 0.5)
    if p in (math.inf, float("inf")):
        return amax(x.abs(), dims, keepdim)
    if p in (-math.inf, float("-inf")):
        return amin(x.abs(), dims, keepdim)
    if p == 0:  # the count of nonzeros, tied to x's graph with a zero gradient (as torch's) by x.sign() * 0
        return sum((x != 0).to(x.dtype) + x.sign() * 0, dims, keepdim)
    if p == 1:
        return sum(x.abs(), dims, keepdim)
    if p < 0:
        return _negative_norm(x, p, dims, keepdim)
    return _safe_pow(sum(_safe_pow(x.abs(), p), dims, keepdim), 1.0 / p)


def _negative_norm(x, p, dims, keepdim):
    """The p-norm for p < 0: 0 where a reduced element is 0, with a zero gradient there (torch's), not NaN."""
    zero = x == 0
    size = where(zero, 1.0, x.abs())
    return where(any(zero, dims, keepdim), 0.0, sum(size ** p, dims, keepdim) ** (1.0 / p))


def _nuclear_norm(x, dim, keepdim):
    """torch's ``norm(x, "nuc")``: the sum of the singular values of the matrices over the 2 dims ``dim``
    (default: a 2-D input's own)."""
    pair = (0, 1) if dim is None and x.ndim == 2 else dim
    if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
        raise RuntimeError(f"norm: 'nuc' is a matrix norm: dim must be a 2-tuple of dims (or None for a 2-D "
                           f"input), got dim={dim!r} for a {x.ndim}-D input")
    if not x.dtype.is_floating_point:
        raise RuntimeError(f"norm: 'nuc' expects a floating point input, got {x.dtype.name}")
    rows, cols = (normalize_dim(d, x.ndim, "norm") for d in pair)
    if rows == cols:
        raise RuntimeError(f"norm: 'nuc' needs two different dims, got dim={dim!r}")
    out = _NuclearNorm.apply(views.movedim(x, (rows, cols), (-2, -1)))
    for d in sorted((rows, cols)) if keepdim else ():
        out = out.unsqueeze(d)
    return out


class _NuclearNorm(Function):
    """Sum of the singular values over the last two dims. minidl has no SVD kernel, so numpy's SVD runs on the
    host (a copy there and back on a GPU); the gradient is U V^T, as torch's."""

    @staticmethod
    def forward(ctx, x):
        u, s, vh = np.linalg.svd(x._host_values().astype(np.float64), full_matrices=False)
        ctx.direction = from_host_array(u @ vh, x.device, x.dtype)
        return from_host_array(s.sum(-1), x.device, x.dtype)

    @staticmethod
    def backward(ctx, g):
        return g.unsqueeze(-1).unsqueeze(-1) * ctx.direction


def _safe_pow(v, e):
    """v ** e for v >= 0, with gradient 0 (not nan) where v == 0, as in PyTorch's norm and std."""
    if not v.requires_grad or e <= 0:
        return v.sqrt() if e == 0.5 else v ** e
    zero = v == 0
    safe = where(zero, 1.0, v)
    return where(zero, 0.0, safe.sqrt() if e == 0.5 else safe ** e)


def _truth(x, result):
    """any/all answer in bool, except for uint8 input, where torch keeps uint8 (a relic of the days
    before bool tensors that torch still honours)."""
    return cast(result, dt.uint8) if x.dtype is dt.uint8 else result


@op()
def any(x, dim=None, keepdim=False):
    return _truth(x, sum(x != 0, _dims(x, dim, "any"), keepdim) > 0)


@op()
def all(x, dim=None, keepdim=False):
    return _truth(x, sum(x == 0, _dims(x, dim, "all"), keepdim) == 0)


@op()
def count_nonzero(x, dim=None):
    return sum(x != 0, _dims(x, dim, "count_nonzero"))


# ----------------------------------------------------------------------------- scans
def scan_raw(op, x, dim, result_dtype):
    compute = dt.arithmetic_dtype(result_dtype)
    xc = cast(x, compute)
    out = new_like_shape(x.shape, compute, x)
    if x.ndim == 0:
        kernel("copy", x)(buf(xc), xc._layout, buf(out), out._layout)
    else:
        kernel("scan", x)(op, buf(xc), xc._layout, dim, buf(out), out._layout)
    return cast(out, result_dtype)


class Cumsum(Function):
    @staticmethod
    def forward(ctx, x, dim, dtype):
        ctx.dim = dim
        return scan_raw("cumsum", x, dim, dtype)

    @staticmethod
    def backward(ctx, g):
        if g.ndim == 0:
            return g, None, None
        return g.flip(ctx.dim).cumsum(ctx.dim).flip(ctx.dim), None, None


class Cumprod(Function):
    @staticmethod
    def forward(ctx, x, dim, dtype):
        y = scan_raw("cumprod", x, dim, dtype)
        ctx.dim = dim
        ctx.save_for_backward(x, y)
        return y

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        if g.ndim == 0:
            return g, None, None
        d = ctx.dim
        if bool((x == 0).any()):
            return _cumprod_grad_with_zeros(x, g, d), None, None
        return (g * y).flip(d).cumsum(d).flip(d) / x, None, None


def _cumprod_grad_with_zeros(x, g, d):
    """dL/dx_k = sum over i >= k of g_i * (product of x_j, j <= i, j != k): no division by x."""
    xm, gm = x.movedim(d, -1), g.movedim(d, -1)
    n = xm.shape[-1]
    k, i = arange(n, device=x.device).reshape((n, 1)), arange(n, device=x.device).reshape((1, n))
    rows = xm.unsqueeze(-2).expand(tuple(xm.shape[:-1]) + (n, n)).masked_fill(k == i, 1)
    terms = (rows.cumprod(-1) * gm.unsqueeze(-2)).masked_fill(i < k, 0)
    return terms.sum(-1).movedim(-1, d)


@op(samples=lambda t: [
    t.S("cumsum", lambda x: x.cumsum(1), t.rn(3, 4)),
    t.S("cumsum-noncontig", lambda x: cumsum(x, 0), t.NC(t.rn(4, 3), "F"))])
@autocast_op("cumsum")
def cumsum(x, dim, dtype=None):
    return Cumsum.apply(x, normalize_dim(dim, x.ndim, "cumsum"), _sum_dtype(x, dtype))


@op(samples=lambda t: [
    t.S("cumprod", lambda x: x.cumprod(1), t.pos(3, 4)),
    t.S("cumprod-negative-noncontig", lambda x: x.cumprod(0), t.NC(t.nonzero(4, 3), "F")),
    t.S("cumprod-zeros", lambda x: x.cumprod(1), t.zeros_at(t.pos(3, 4), (0, 1), (1, 3))),
    t.S("cumprod-zeros", lambda x: x.cumprod(1), t.zeros_at(t.pos(3, 4), (0, 1), (1, 3)), second_order=True)])
@autocast_op("cumprod")
def cumprod(x, dim, dtype=None):
    return Cumprod.apply(x, normalize_dim(dim, x.ndim, "cumprod"), _sum_dtype(x, dtype))


# ----------------------------------------------------------------------------- softmax family
def _rowwise(name, dim, like, *inputs, log):
    """The ``name`` primitive over the rows along ``dim``: inputs moved to put ``dim`` last and
    packed (no copy when it already is), the result moved back (and packed, as PyTorch returns it)."""
    compute = dt.compute_dtype(like.dtype)
    last = dim >= like.ndim - 1                                # a 0-d tensor is one row of one
    rows = [cast(t, compute) if last else cast(t, compute).movedim(dim, -1) for t in inputs]
    out = new_like_shape(rows[0].shape, compute, rows[0])
    kernel(name, like)(*(packed_buffer(t) for t in rows), buf(out), like.shape[dim] if like.ndim else 1, log)
    return cast(out if last else out.movedim(-1, dim).contiguous(), like.dtype)


class Softmax(Function):
    """softmax (``log`` False) and log_softmax (``log`` True) along ``dim`` as one fused kernel each
    way. Under create_graph the backward is written with differentiable ops instead."""

    @staticmethod
    def forward(ctx, x, dim, log):
        y = _rowwise("softmax", dim, x, x, log=log)
        ctx.dim, ctx.log = dim, log
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        if not grad_enabled():
            return _rowwise("softmax_backward", ctx.dim, y, y, g, log=ctx.log), None, None
        if ctx.log:
            return g - y.exp() * g.sum(ctx.dim, keepdim=True), None, None
        return y * (g - (g * y).sum(ctx.dim, keepdim=True)), None, None


def _softmax_input(x, dtype):
    if dtype is not None:
        return x.to(dt.to_dtype(dtype))
    return x if x.dtype.is_floating_point else x.to(dt.get_default_dtype())


@op(samples=lambda t: [
    t.S("softmax", lambda x: softmax(x, 1), t.rn(3, 4)),
    t.S("softmax-dim0-noncontig", lambda x: x.softmax(0), t.NC(t.rn(3, 4), "F")),
    t.S("softmax-public", lambda x: softmax(x, dim=0), t.NC(t.rn(3, 4), "neg")),
    t.S("softmax", lambda x: x.softmax(1), t.rn(2, 3), second_order=True)])
@autocast_op("softmax")
def softmax(x, dim, dtype=None):
    x = _softmax_input(x, dtype)
    dim = normalize_dim(dim, x.ndim, "softmax")
    return Softmax.apply(x, dim, False) if x.numel() else x.clone()


@op(samples=lambda t: [
    t.S("log_softmax", lambda x: log_softmax(x, -1), t.rn(3, 4)),
    t.S("log_softmax-3d", lambda x: x.log_softmax(1), t.rn(2, 3, 4)),
    t.S("log_softmax-public", lambda x: log_softmax(x, dim=1), t.rn(2, 5)),
    t.S("log_softmax", lambda x: x.log_softmax(0), t.rn(3, 2), second_order=True)])
@autocast_op("log_softmax")
def log_softmax(x, dim, dtype=None):
    x = _softmax_input(x, dtype)
    dim = normalize_dim(dim, x.ndim, "log_softmax")
    return Softmax.apply(x, dim, True) if x.numel() else x.clone()
