"""Batch norm as one kernel each way (the ``batch_norm`` primitives): the batch statistics, the running ones and
the affine normalisation in one launch forward, the gradients of input, weight and bias in one launch backward,
where the composed form took ~15 ops forward and ~30 backward."""
from __future__ import annotations

import math

from .. import _dtype as dt
from .._layouts import channels_last, channels_last_3d
from ..autograd import Function, no_grad
from .autocast_mode import autocast_op
from .core import buf, grad_enabled, kernel, new_like_shape, packed_buffer
from .norm_rows import _norm_of_mixed_dtypes
from .normalization import _channel_shape
from .registry import op


def _standardize(x, dims, eps):
    """(x - mean) / sqrt(var + eps) over ``dims`` (biased variance), and that 1 / sqrt(var + eps): the
    differentiable forward that create_graph differentiates."""
    centered = x - x.mean(dims, keepdim=True)
    rstd = ((centered * centered).mean(dims, keepdim=True) + eps).rsqrt()
    return centered * rstd, rstd


def _arrangement(x):
    """How the kernels read x: (channels_last, the order of x's dims that is packed or gets packed). A 2-D input
    and a channels-last 4-D or 5-D one are rows of C channels (N, *spatial, C); anything else (N, C, S) planes."""
    if x.ndim == 2:
        return True, None
    for fmt in (channels_last, channels_last_3d):
        if len(fmt.order) == x.ndim and not x.is_contiguous() and x.is_contiguous(memory_format=fmt):
            return True, (0,) + tuple(range(2, x.ndim)) + (1,)
    return False, None


def _geometry(x):
    N, C = x.shape[0], x.shape[1]
    return N, C, math.prod(x.shape[2:])


def _inverse(order):
    return tuple(order.index(d) for d in range(len(order)))


def _channel_buffer(t):
    return None if t is None else packed_buffer(t)


class BatchNorm(Function):
    """Batch norm of x (N, C, *spatial) in float32 or float64, with weight and bias of x's dtype or None.
    ``stats`` = (running_mean, running_var): packed tensors of x's dtype (or None), read in eval mode and updated
    in place in training (outside autograd, so in a tuple). Saves x, the per-channel mean and 1/sqrt(var + eps)."""

    @staticmethod
    def forward(ctx, x, weight, bias, stats, training, momentum, eps):
        rows, order = _arrangement(x)
        arranged = x if order is None else x.permute(order)
        C = x.shape[1]
        out = new_like_shape(tuple(arranged.shape), x.dtype, arranged)
        mean, invstd = new_like_shape((C,), x.dtype, x), new_like_shape((C,), x.dtype, x)
        kernel("batch_norm", x)(packed_buffer(arranged), buf(out), _geometry(x), rows, _channel_buffer(weight),
                                _channel_buffer(bias), buf(mean), buf(invstd), *(_channel_buffer(s) for s in stats),
                                training, momentum, eps)
        ctx.save_for_backward(x, weight, mean, invstd)
        ctx.training, ctx.eps, ctx.has_bias = training, eps, bias is not None
        return out if order is None else out.permute(_inverse(order))

    @staticmethod
    def backward(ctx, g):
        x, weight, mean, invstd = ctx.saved_tensors
        if grad_enabled():
            dx, dw, db = _differentiable_backward(x, weight, mean, invstd, g, ctx.training, ctx.eps)
        else:
            rows, order = _arrangement(x)
            arranged, g = (x, g) if order is None else (x.permute(order), g.permute(order))
            C = x.shape[1]
            dx = new_like_shape(tuple(arranged.shape), x.dtype, arranged)
            dw, db = new_like_shape((C,), x.dtype, x), new_like_shape((C,), x.dtype, x)
            kernel("batch_norm_backward", x)(packed_buffer(arranged), packed_buffer(g.to(x.dtype)), _geometry(x),
                                             rows, _channel_buffer(weight), buf(mean), buf(invstd), buf(dx), buf(dw),
                                             buf(db), ctx.training)
            dx = dx if order is None else dx.permute(_inverse(order))
        return dx, dw if weight is not None else None, db if ctx.has_bias else None, None, None, None, None


def _differentiable_backward(x, weight, mean, invstd, g, training, eps):
    """The kernel's gradients written with differentiable ops (under create_graph): in training xhat and
    1/sqrt(var + eps) recomputed as functions of x, so that higher orders see the statistics' dependence on x."""
    shape, dims = _channel_shape(x), (0,) + tuple(range(2, x.ndim))
    if training:
        xhat, rstd = _standardize(x, dims, eps)
    else:
        rstd = invstd.reshape(shape)
        xhat = (x - mean.reshape(shape)) * rstd
    db, dw = g.sum(dims), (g * xhat).sum(dims)
    scale = rstd if weight is None else rstd * weight.reshape(shape)
    if not training:
        return scale * g, dw, db
    count = max(1, math.prod(x.shape) // max(1, x.shape[1]))
    return scale * (g - db.reshape(shape) / count - xhat * dw.reshape(shape) / count), dw, db


def _check_channels(input, **tensors):
    for name, t in tensors.items():
        if t is not None and t.numel() != input.shape[1]:
            raise RuntimeError(f"{name} should contain {input.shape[1]} elements not {t.numel()}")


def _running(t, dtype):
    """A running statistic as the kernel takes it (packed, of the input's compute dtype): t itself, or a copy."""
    return t if t is None or (t.dtype is dtype and t.is_contiguous()) else t.to(dtype).contiguous()


@op(method=False, namespace="nn.functional", samples=lambda t: [  # (torch.batch_norm orders its arguments otherwise)
    t.S("batch_norm-training", lambda x, w, b: batch_norm(x, None, None, w, b, training=True), t.rn(4, 3, 2),
        t.rn(3), t.rn(3)),
    t.S("batch_norm-eval", lambda x: batch_norm(x, t.const([0.5, -1.0]), t.const([2.0, 0.5]), training=False),
        t.NC(t.rn(3, 2, 2, 2), "gap")),
    t.S("batch_norm-training-2d-weight", lambda x, w: batch_norm(x, None, None, w, training=True), t.rn(5, 3),
        t.rn(3)),
    t.S("batch_norm-eval-affine", lambda x, w, b: batch_norm(x, t.const([0.5, -1.0]), t.const([2.0, 0.5]), w, b),
        t.rn(3, 2, 4), t.rn(2), t.rn(2)),
])
@autocast_op("batch_norm")
@_norm_of_mixed_dtypes
def batch_norm(input, running_mean, running_var, weight=None, bias=None, training: bool = False,
               momentum: float = 0.1, eps: float = 1e-5):
    """Normalize over every dim but the channel dim 1. In training mode the batch statistics are used and
    the running ones (when given) updated in place with the unbiased variance; else the running ones are used.
    Computed in float32 for float16/bfloat16 inputs; momentum None counts as 0.1 (nn.BatchNorm passes
    1 / num_batches_tracked for its cumulative average)."""
    if input.ndim < 2 and input.numel() == 0:
        return input.clone()  # (torch's one 1-D case: no channels and no values, nothing to normalise)
    if input.ndim < 2:
        raise ValueError(f"batch_norm: expected at least 2D input, got {input.ndim}D")
    _check_channels(input, running_mean=running_mean, running_var=running_var, weight=weight, bias=bias)
    count = math.prod(input.shape) // input.shape[1] if input.shape[1] else 0
    if training and count == 1:  # (no values is an empty batch: an empty result, the running statistics kept)
        raise ValueError(f"Expected more than 1 value per channel when training, got input size "
                         f"{list(input.shape)}")
    if not training and (running_mean is None or running_var is None):
        raise ValueError("batch_norm: running_mean and running_var are required in eval mode")
    compute = dt.compute_dtype(input.dtype)
    weight, bias = (None if p is None else p.to(compute) for p in (weight, bias))
    given = (running_mean, running_var)
    stats = tuple(_running(s, compute) for s in given) if count or not training else (None, None)
    if training and (stats[0] is None) != (stats[1] is None):   # (one of them: the other goes to scratch)
        stats = tuple(new_like_shape((input.shape[1],), compute, input).zero_() if s is None else s for s in stats)
    out = BatchNorm.apply(input.to(compute), weight, bias, stats,
                          bool(training), 0.1 if momentum is None else float(momentum), float(eps))
    if training:
        for mine, theirs in zip(stats, given):
            if mine is not None and theirs is not None and mine is not theirs:
                theirs.detach().copy_(mine)
    return out.to(input.dtype)


def _instance_norm_samples(t):
    return [
        t.S("instance_norm", lambda x, w, b: instance_norm(x, weight=w, bias=b), t.rn(2, 3, 4), t.rn(3), t.rn(3)),
        t.S("instance_norm-running", lambda x: instance_norm(x, t.const([0.5, -1.0]), t.const([2.0, 0.5]),
                                                            momentum=0.3), t.rn(2, 2, 2, 3)),
        t.S("instance_norm-eval", lambda x, w: instance_norm(x, t.const([0.5, -1.0]), t.const([2.0, 0.5]), w,
                                                            use_input_stats=False), t.rn(3, 2, 4), t.rn(2)),
        t.S("instance_norm-affine", lambda x, w: instance_norm(x, weight=w) ** 2, t.rn(2, 2, 3), t.rn(2),
            second_order=True),
    ]


@op(method=False, namespace="nn.functional", samples=_instance_norm_samples)
def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None, use_input_stats: bool = True,
                  momentum: float = 0.1, eps: float = 1e-5):
    """Normalise each (sample, channel) plane over its spatial dims: batch norm of the input viewed as
    (1, N*C, *spatial), as torch computes it, so that the batch-norm kernel gives the statistics, the update of
    the running ones (one per (sample, channel), averaged over the samples afterwards) and the eval form."""
    if input.ndim < 2:
        raise ValueError(f"instance_norm: expected at least 2D input (N, C, *spatial), got shape {list(input.shape)}")
    if use_input_stats and math.prod(input.shape[2:]) == 1:
        raise ValueError(f"Expected more than 1 spatial element when training, got input size {list(input.shape)}")
    if not use_input_stats and (running_mean is None or running_var is None):
        raise RuntimeError("instance_norm: expected running_mean and running_var to be defined when use_input_stats "
                           "is false")
    _check_channels(input, running_mean=running_mean, running_var=running_var, weight=weight, bias=bias)
    N, C = input.shape[0], input.shape[1]
    per_plane = [None if t is None else t.repeat(N) for t in (running_mean, running_var, weight, bias)]
    with no_grad():
        per_plane[:2] = [None if s is None else s.to(dt.compute_dtype(input.dtype)) for s in per_plane[:2]]
    out = batch_norm(input.reshape((1, N * C) + tuple(input.shape[2:])), *per_plane, training=use_input_stats,
                     momentum=momentum, eps=eps)
    with no_grad():
        for given, mine in zip((running_mean, running_var), per_plane):
            if given is not None:
                given.copy_(mine.reshape(N, C).mean(0))
    return out.reshape(input.shape)
