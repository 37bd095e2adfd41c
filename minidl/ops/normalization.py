"""Normalization layers' ops: layer norm (one graph node, with a closed-form backward) and group norm (batch
norm: ``batchnorm.py``); each takes a float16/bfloat16 input with float32 parameters as PyTorch does."""
from __future__ import annotations

import functools
import math

from .. import _dtype as dt
from ..autograd import Function, grad_mode
from .autocast_mode import autocast_op
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


def _layer_norm_samples(t):
    return [
        t.S("layer_norm", lambda x, w, b: layer_norm(x, (4,), w, b), t.rn(3, 4), t.rn(4), t.rn(4)),
        t.S("layer_norm-2d-shape-noncontig", lambda x, w: layer_norm(x, (3, 4), w, eps=1e-3),
            t.NC(t.rn(2, 3, 4), "gap"), t.NC(t.rn(3, 4), "F")),
        t.S("layer_norm-no-affine", lambda x: layer_norm(x, 4) ** 2, t.rn(2, 4), second_order=True),
        t.S("layer_norm-affine", lambda x, w: layer_norm(x, (3,), w), t.rn(2, 3), t.rn(3), second_order=True),
    ]


@op(method=False, samples=_layer_norm_samples)
@autocast_op("layer_norm")
@_norm_of_mixed_dtypes
def layer_norm(input, normalized_shape, weight=None, bias=None, eps: float = 1e-5):
    if isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    normalized_shape = tuple(normalized_shape)
    k = len(normalized_shape)
    if tuple(input.shape[input.ndim - k:]) != normalized_shape:
        raise RuntimeError(f"Given normalized_shape={list(normalized_shape)}, expected input with shape "
                           f"[*, {', '.join(str(s) for s in normalized_shape)}], but got input of size "
                           f"{list(input.shape)}")
    return NativeLayerNorm.apply(input, weight, bias, tuple(range(input.ndim - k, input.ndim)), eps)


class NativeLayerNorm(Function):
    """Layer norm as one graph node (torch's grad_fn has this name too). Its backward is the closed form
    ``rstd * (gy - mean(gy) - xhat * mean(gy * xhat))`` with ``gy = g * weight``: about half the
    elementwise passes of differentiating the composed ops (a transformer step runs two per block)."""

    @staticmethod
    def forward(ctx, x, weight, bias, dims, eps):
        xhat, rstd = _standardize(x, dims, eps)
        ctx.dims, ctx.eps = dims, eps
        ctx.save_for_backward(x, xhat, rstd, weight)
        out = xhat if weight is None else xhat * weight
        return out if bias is None else out + bias

    @staticmethod
    def backward(ctx, g):
        x, xhat, rstd, weight = ctx.saved_tensors
        dims = ctx.dims
        if grad_mode.is_grad_enabled():   # create_graph: xhat, rstd as functions of x, so higher orders stay exact
            xhat, rstd = _standardize(x, dims, ctx.eps)
        lead = tuple(range(x.ndim - len(dims)))
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        gx = gw = gb = None
        if need_x:
            gy = g if weight is None else g * weight
            gx = (gy - gy.mean(dims, keepdim=True) - xhat * (gy * xhat).mean(dims, keepdim=True)) * rstd
        if need_w:
            gw = (g * xhat).sum(lead) if lead else g * xhat
        if need_b:
            gb = g.sum(lead) if lead else g
        return gx, gw, gb, None, None


def _standardize(x, dims, eps):
    """(x - mean) / sqrt(var + eps) over ``dims`` (biased variance), and that 1 / sqrt(var + eps)."""
    centered = x - x.mean(dims, keepdim=True)
    rstd = ((centered * centered).mean(dims, keepdim=True) + eps).rsqrt()
    return centered * rstd, rstd


def _channel_shape(input):
    return (1, input.shape[1]) + (1,) * (input.ndim - 2)


@op(method=False, samples=lambda t: [
    t.S("group_norm", lambda x, w, b: group_norm(x, 2, w, b), t.rn(2, 4, 3), t.rn(4), t.rn(4)),
])
@autocast_op("group_norm")
@_norm_of_mixed_dtypes
def group_norm(input, num_groups: int, weight=None, bias=None, eps: float = 1e-5):
    if input.ndim < 2 or input.shape[1] % num_groups:
        raise RuntimeError(f"group_norm: expected an input with a channel count divisible by {num_groups}, "
                           f"got shape {list(input.shape)}")
    n = input.shape[0]
    x = input.reshape(n, num_groups, math.prod(input.shape[1:]) // num_groups)  # (no -1: N may be 0)
    mean = x.mean(2, keepdim=True)
    var = ((x - mean) ** 2).mean(2, keepdim=True)
    out = ((x - mean) * (var + eps).rsqrt()).reshape(tuple(input.shape))
    shape = _channel_shape(input)
    if weight is not None:
        out = out * weight.reshape(shape)
    if bias is not None:
        out = out + bias.reshape(shape)
    return out
