"""Dropout as one kernel each way: the ``dropout`` primitive draws the kept elements, writes the scaled mask
and the product in one pass (the composition took five: draw, compare, cast, scale, multiply); the backward
is one product with the saved mask."""
from __future__ import annotations

from .. import _dtype as dt
from ..autograd import Function
from .core import buf, kernel, new_like_shape, packed_buffer
from .random import device_generator
from .registry import op


class NativeDropout(Function):
    """x * mask, mask = 1/(1-p) on the elements a ``bernoulli_(1 - p)`` over x's shape keeps (the same draws, so
    the same elements as the composition for a seed), else 0."""

    @staticmethod
    def forward(ctx, x, p):
        out, mask = new_like_shape(x.shape, x.dtype, x), new_like_shape(x.shape, x.dtype, x)
        if x.numel():
            seed, offset = device_generator(x.device).claim(x.numel())
            kernel("dropout", x)(packed_buffer(x), buf(out), buf(mask), p, seed, offset)
        ctx.save_for_backward(mask)
        return out

    @staticmethod
    def backward(ctx, g):
        mask, = ctx.saved_tensors
        return g * mask, None


def _seeded(x, p):
    """The same draws at every call (finite differences need a fixed mask), in float64 whatever x's dtype (a
    float32 dropout draws other numbers, and the sweep compares float32 runs of a sample with float64 ones)."""
    device_generator(x.device).manual_seed(0)
    return fused_dropout(x.double(), p).to(x.dtype)


@op("_fused_dropout", method=False, namespace="nn.functional", samples=lambda t: [
    t.S("fused_dropout", lambda x: _seeded(x, 0.3), t.rn(3, 4)),
    t.S("fused_dropout-gradgrad", lambda x: _seeded(x, 0.5) ** 2, t.rn(5), second_order=True)])
def fused_dropout(input, p: float):
    """Dropout in training mode with 0 < p < 1 on a float32 or float64 tensor (F.dropout's other cases are
    the identity, zeros, or the composition)."""
    if input.dtype not in (dt.float32, dt.float64):
        raise TypeError(f"_fused_dropout: float32 or float64 input expected, got {input.dtype.name}")
    return NativeDropout.apply(input, float(p))
