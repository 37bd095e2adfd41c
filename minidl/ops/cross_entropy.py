"""Cross-entropy on logits and the negative log-likelihood on log-probabilities over rows of classes, as one
kernel each way (the ``cross_entropy`` primitives): no log-softmax tensor, gather or one-hot is ever stored."""
from __future__ import annotations

import numpy as np

from .. import _dtype as dt
from ..autograd import Function
from .core import buf, cast, check_devices, grad_enabled, kernel, new_like_shape, packed_buffer
from .creation import arange
from .elementwise import where
from .registry import op

REDUCTIONS = ("none", "mean", "sum")


class CrossEntropy(Function):
    """The loss of packed (rows, n) ``x`` against int64 ``target`` (rows,), reduced: per row
    ``(1 - e) w_t (lse - x_t) + e/n sum_c w_c (lse - x_c)`` (lse = log(sum(exp(x))), 0 when x holds
    log-probabilities, not ``logits``); mean divides by the summed weights of the counted rows, as torch.
    Under create_graph the backward is written with differentiable ops instead."""

    @staticmethod
    def forward(ctx, x, target, weight, ignore_index, smoothing, logits, reduction):
        rows, n = x.shape
        out, wrow = (new_like_shape((rows,), x.dtype, x) for _ in range(2))
        stats = new_like_shape((rows, 2), x.dtype, x) if logits else None
        kernel("cross_entropy", x)(packed_buffer(x), packed_buffer(target),
                                   None if weight is None else packed_buffer(weight), buf(out), buf(wrow),
                                   None if stats is None else buf(stats), n, ignore_index, smoothing, logits)
        ctx.save_for_backward(x, stats)
        ctx.target, ctx.weight, ctx.meta = target, weight, (ignore_index, smoothing, logits, reduction)
        if reduction == "none":
            return out
        total = out.sum()
        if reduction == "sum":
            return total
        ctx.counted = wrow.sum()
        return total / ctx.counted

    @staticmethod
    def backward(ctx, g):
        x, stats = ctx.saved_tensors
        ignore_index, smoothing, logits, reduction = ctx.meta
        g = g.reshape(-1) if reduction != "mean" else (g / ctx.counted).reshape(1)
        if grad_enabled():
            grad = _differentiable_backward(x, ctx.target, ctx.weight, ignore_index, smoothing, logits, g)
            return grad, None, None, None, None, None, None
        grad = new_like_shape(x.shape, x.dtype, x)
        kernel("cross_entropy_backward", x)(packed_buffer(x), packed_buffer(ctx.target),
                                            None if ctx.weight is None else packed_buffer(ctx.weight),
                                            None if stats is None else buf(stats), packed_buffer(cast(g, x.dtype)),
                                            buf(grad), x.shape[1], ignore_index, smoothing, logits)
        return grad, None, None, None, None, None, None


def _differentiable_backward(x, target, weight, ignore_index, smoothing, logits, g):
    """The kernel's gradient written with differentiable ops (under create_graph); g has one element per row
    or one for all."""
    n = x.shape[1]
    valid = target != ignore_index
    safe = where(valid, target, 0)
    g = where(valid, g, 0.0)    # (a mean over no counted row has g = inf: its ignored rows still get 0, as torch)
    counted = valid.to(x.dtype)
    wt = counted if weight is None else weight[safe] * counted
    onehot = (arange(n, device=x.device) == safe.unsqueeze(1)).to(x.dtype)
    grad = onehot * (g * wt * -(1.0 - smoothing)).unsqueeze(1)
    if logits:
        total = n if weight is None else weight.sum()
        coef = g * ((1.0 - smoothing) * wt + counted * (total * (smoothing / n)))
        grad = grad + x.softmax(1) * coef.unsqueeze(1)
        if smoothing > 0:
            uniform = (g * counted * (smoothing / n)).unsqueeze(1)
            grad = grad - (uniform if weight is None else uniform * weight)
    return grad


def _samples(t):
    def target():   # (made inside the callables: const() puts them on the device the sweep runs on)
        return t.const(np.array([2, 0, -100, 3, 1]))

    def weight():
        return t.const(np.array([0.5, 1.0, 2.0, 1.5]))
    return [
        t.S("cross_entropy-rows", lambda x: cross_entropy_rows(x, target(), None, -100, 0.0, True, "mean"),
            t.rn(5, 4), second_order=True),
        t.S("cross_entropy-rows-weighted-smoothed", lambda x: cross_entropy_rows(x, target(), weight(), -100, 0.2,
                                                                                 True, "none"), t.rn(5, 4)),
        t.S("nll_loss-rows", lambda x: cross_entropy_rows(x, target().abs() % 4, weight(), 3, 0.0, False, "sum"),
            t.rn(5, 4), second_order=True),
    ]


@op("_cross_entropy_rows", method=False, namespace="nn.functional", samples=_samples)
def cross_entropy_rows(x, target, weight, ignore_index: int, smoothing: float, logits: bool, reduction: str):
    """``F.cross_entropy`` (``logits``) or ``F.nll_loss`` on (rows, n) ``x`` and int64 ``target`` (rows,), the
    arguments checked there; float16/bfloat16 are computed in float32. The result has x's dtype."""
    if reduction not in REDUCTIONS:
        raise ValueError(f"{reduction} is not a valid value for reduction")
    check_devices("cross_entropy" if logits else "nll_loss", x, target, *([] if weight is None else [weight]))
    compute = dt.compute_dtype(x.dtype)
    weight = None if weight is None else weight.to(compute)
    loss = CrossEntropy.apply(x.to(compute), target, weight, int(ignore_index), float(smoothing), bool(logits),
                              reduction)
    return loss.to(x.dtype)
