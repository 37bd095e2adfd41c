"""Layer, RMS and group norm as one graph node each on the ``norm_rows`` primitives: statistics and the affine
output in one pass per row forward, the input and parameter gradients in one pass backward; and ``rms_norm``."""
from __future__ import annotations

import functools
import math

from .. import _dtype as dt
from .._type_info import finfo
from ..autograd import Function
from .core import buf, grad_enabled, kernel, new_like_shape, packed_buffer
from .registry import op


def _norm_of_mixed_dtypes(norm):
    """PyTorch's norms take a float16 (or bfloat16) input with float32 parameters or running
    statistics, as autocast hands them a matmul's output: they compute in float32 and give the
    result in the input's dtype. Other inputs go through unchanged."""
    @functools.wraps(norm)
    def wrapped(input, *args, **kwargs):
        if input.dtype in (dt.float16, dt.bfloat16) and any(
                hasattr(a, "_layout") and a.dtype is dt.float32 for a in (*args, *kwargs.values())):
            return norm(input.float(), *args, **kwargs).to(input.dtype)
        return norm(input, *args, **kwargs)
    return wrapped


class NormRows(Function):
    """Normalise each packed run of n elements of ``x`` (float32 or float64; weight and bias of its dtype).
    The affine of element j of row r is parameter ``(r % cycle) * (n // span) + j // span`` (see the
    ``norm_rows`` contract): per column for layer/RMS norm, per channel for group norm."""

    @staticmethod
    def forward(ctx, x, weight, bias, n, span, cycle, eps, rms):
        rows = x.numel() // n if n else 0
        out = new_like_shape(tuple(x.shape), x.dtype, x)
        mean, rstd = (new_like_shape((rows,), x.dtype, x) for _ in range(2))
        if rows:
            kernel("norm_rows", x)(packed_buffer(x), _buffer(weight), _buffer(bias), buf(out), buf(mean), buf(rstd),
                                   n, span, cycle, eps, rms)
        ctx.geometry = n, span, cycle, eps, rms
        ctx.bias_shape = None if bias is None else tuple(bias.shape)
        ctx.save_for_backward(x, weight, mean, rstd)
        return out

    @staticmethod
    def backward(ctx, g):
        x, weight, mean, rstd = ctx.saved_tensors
        n, span, cycle, eps, rms = ctx.geometry
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        if grad_enabled():   # create_graph: the statistics as functions of x, so higher orders stay exact
            gx, gw, gb = _composed_backward(x, weight, g, n, span, cycle, eps, rms, need_w, need_b)
            return gx, gw, None if gb is None else gb.reshape(ctx.bias_shape), None, None, None, None, None
        dx = new_like_shape(tuple(x.shape), x.dtype, x) if need_x else None   # (split_backward's weight pass)
        dw = new_like_shape(tuple(weight.shape), x.dtype, x) if need_w else None
        db = new_like_shape(ctx.bias_shape, x.dtype, x) if need_b else None
        if n:
            kernel("norm_rows_backward", x)(packed_buffer(x), _buffer(weight), buf(mean), buf(rstd),
                                            packed_buffer(g.to(x.dtype)), _buffer(dx), _buffer(dw), _buffer(db), n, span,
                                            cycle, rms)
        else:
            for t in (dw, db):
                if t is not None:
                    t.zero_()
        return dx, dw, db, None, None, None, None, None


def _buffer(t):
    return None if t is None else packed_buffer(t)


def _composed_backward(x, weight, g, n, span, cycle, eps, rms, need_w, need_b):
    """NormRows' gradients written with differentiable ops (under create_graph): x as (rows / cycle, cycle, n),
    each parameter repeated over its span."""
    shape = (-1, cycle, n) if n else (0, cycle, n)
    xr, gr = x.reshape(shape), g.reshape(shape)
    centered = xr if rms else xr - xr.mean(-1, keepdim=True)
    rstd = ((centered * centered).mean(-1, keepdim=True) + eps).rsqrt()
    xhat = centered * rstd
    per = n // span
    gy = gr if weight is None else gr * weight.reshape(cycle, per, 1).expand(cycle, per, span).reshape(cycle, n)
    gx = gy - xhat * (gy * xhat).mean(-1, keepdim=True)
    if not rms:
        gx = gx - gy.mean(-1, keepdim=True)
    gx = (gx * rstd).reshape(tuple(x.shape))

    def per_parameter(t):
        return t.sum(0).reshape(cycle, per, span).sum(-1).reshape(cycle * per)
    gw = per_parameter(gr * xhat).reshape(tuple(weight.shape)) if need_w else None
    gb = per_parameter(gr) if need_b else None
    return gx, gw, gb


def norm_rows(name, input, weight, bias, n, span, cycle, eps, rms):
    """The op behind layer_norm, rms_norm and group_norm: half inputs computed in float32 (as torch), the
    parameters in the input's dtype, then NormRows."""
    if not input.dtype.is_floating_point:
        raise TypeError(f"{name}: expected a floating point input, got {input.dtype}")
    compute = dt.compute_dtype(input.dtype)
    weight, bias = (None if p is None else p.to(compute) for p in (weight, bias))
    out = NormRows.apply(input.to(compute), weight, bias, n, span, cycle, eps, rms)
    return out.to(input.dtype)


def check_parameter(name, parameter, shape, what):
    if parameter is not None and tuple(parameter.shape) != tuple(shape):
        raise RuntimeError(f"{name}: expected {what} of shape {list(shape)}, got {list(parameter.shape)}")


def trailing_rows(name, input, normalized_shape):
    """normalized_shape as a tuple, and the elements it spans, after checking it ends input's shape."""
    if isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    normalized_shape = tuple(normalized_shape)
    k = len(normalized_shape)
    if k > input.ndim or tuple(input.shape[input.ndim - k:]) != normalized_shape:
        raise RuntimeError(f"{name}: given normalized_shape={list(normalized_shape)}, expected input with shape "
                           f"[*, {', '.join(str(s) for s in normalized_shape)}], but got input of size "
                           f"{list(input.shape)}")
    return normalized_shape, math.prod(normalized_shape)


def _rms_norm_samples(t):
    return [
        t.S("rms_norm", lambda x, w: rms_norm(x, (4,), w), t.rn(3, 4), t.rn(4)),
        t.S("rms_norm-2d-shape-noncontig", lambda x, w: rms_norm(x, (3, 4), w, eps=1e-3),
            t.NC(t.rn(2, 3, 4), "gap"), t.NC(t.rn(3, 4), "F")),
        t.S("rms_norm-no-weight", lambda x: rms_norm(x, [4]) ** 2, t.rn(2, 4), second_order=True),
        t.S("rms_norm-weight", lambda x, w: rms_norm(x, (3,), w), t.rn(2, 3), t.rn(3), second_order=True),
    ]


@op(method=False, samples=_rms_norm_samples)
@_norm_of_mixed_dtypes
def rms_norm(input, normalized_shape, weight=None, eps: float | None = None):
    """x / sqrt(mean(x**2) + eps) * weight over the trailing ``normalized_shape``; eps None is the machine
    epsilon of the dtype computed in (float32 for half inputs, as torch's)."""
    normalized_shape, n = trailing_rows("rms_norm", input, normalized_shape)
    check_parameter("rms_norm", weight, normalized_shape, "weight")
    if eps is None:
        eps = finfo(dt.compute_dtype(input.dtype) if input.dtype.is_floating_point else dt.float32).eps
    return norm_rows("rms_norm", input, weight, None, n, 1, 1, eps, True)
