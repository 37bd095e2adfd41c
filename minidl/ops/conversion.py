"""Moving a tensor between dtypes and devices, differentiably."""
from __future__ import annotations

import numpy as np

from .. import kernels
from .._tensor_base import Storage, empty, make
from ..autograd import Function
from ..layout import Layout
from .core import cast, kernel, packed_buffer
from .registry import op


class ToDtype(Function):
    @staticmethod
    def forward(ctx, x, dtype):
        ctx.dtype = x.dtype
        return cast(x, dtype)

    @staticmethod
    def backward(ctx, g):
        return (g.to(ctx.dtype) if ctx.dtype.is_floating_point else None), None


class ToDevice(Function):
    """Copy through host memory: the source device's to_host, the target's from_host (none to 'meta', which
    keeps no values: the source is not read)."""

    @staticmethod
    def forward(ctx, x, device):
        ctx.device = x.device
        if device.type == "meta":
            return empty(x.shape, x.dtype, device)
        host = np.asarray(kernel("to_host", x)(packed_buffer(x)))
        storage = Storage(kernels.get("from_host", device.type)(host.copy()), device)
        return make(storage, Layout(x.shape), x.dtype)

    @staticmethod
    def backward(ctx, g):
        return g.to(ctx.device), None


@op(method=False, namespace=None, samples=lambda t: [
    t.S("to-float64", lambda x: ToDtype.apply(x, t.float64), t.rn(3, 4)),
    t.S("to-float32-and-back", lambda x: x.to(t.float32).to(t.float64) * 2, t.rn(3, 4), eps=1e-2, atol=1e-3,
        rtol=1e-3)])
def to_dtype(x, dtype):
    return x if x.dtype is dtype else ToDtype.apply(x, dtype)


@op(method=False, namespace=None, samples=lambda t: [
    t.S("to-cpu", lambda x: ToDevice.apply(x, t.cpu), t.NC(t.rn(3, 4), "F"))])
def to_device(x, device):
    return x if x.device == device else ToDevice.apply(x, device)
