"""The two movers every indexing op is made of: ``Take`` reads elements at flat indices,
``IndexPut`` writes (or adds) them; each is the other's gradient."""
from __future__ import annotations

from .. import _dtype as dt
from ..autograd import Function
from .core import buf, cast, kernel, new_like_shape, packed_buffer, sum_to


class Take(Function):
    """out = x.reshape(-1)[flat]; ``flat`` holds flat indices (the kernel checks their range) and
    gives the result's shape."""

    @staticmethod
    def forward(ctx, x, flat):
        compute = dt.compute_dtype(x.dtype)
        xc = cast(x, compute)
        out = new_like_shape(flat.shape, compute, x)
        kernel("take", x)(buf(xc), xc._layout, packed_buffer(flat), buf(out))
        ctx.save_for_backward(flat)
        ctx.shape = x.shape
        return cast(out, x.dtype)

    @staticmethod
    def backward(ctx, g):
        (flat,) = ctx.saved_tensors
        return IndexPut.apply(g.new_zeros(ctx.shape), flat, g, True), None


class IndexPut(Function):
    """A copy of x with x.reshape(-1)[flat] set to (or, accumulating, increased by) ``values``."""

    @staticmethod
    def forward(ctx, x, flat, values, accumulate):
        compute = dt.compute_dtype(x.dtype)
        out = cast(x, compute)
        out = out.clone() if out is x else out
        vals = cast(values.expand(flat.shape), compute)
        kernel("put", x)(buf(out), out._layout, packed_buffer(flat), packed_buffer(vals), accumulate)
        ctx.save_for_backward(flat)
        ctx.meta = (values.shape, accumulate)
        return cast(out, x.dtype)

    @staticmethod
    def backward(ctx, g):
        (flat,) = ctx.saved_tensors
        values_shape, accumulate = ctx.meta
        gx = None
        if ctx.needs_input_grad[0]:
            gx = g if accumulate else IndexPut.apply(g, flat, g.new_zeros(()), False)
        gv = sum_to(Take.apply(g, flat), values_shape) if ctx.needs_input_grad[2] else None
        return gx, None, gv, None


def put_(x, flat, values, accumulate):
    """x.reshape(-1)[flat] set to (or increased by) ``values``, straight into x's memory: an
    in-place write that records no graph, at the cost of the written elements only (``IndexPut``
    makes a whole copy, for autograd)."""
    vals = cast(values.expand(flat.shape), x.dtype)
    kernel("put", x)(buf(x), x._layout, packed_buffer(flat), packed_buffer(vals), accumulate)
    x._bump_version()
    return x
