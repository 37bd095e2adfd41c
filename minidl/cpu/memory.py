"""Buffers on the CPU are 1-D numpy arrays."""
import numpy as np

from .. import kernels


@kernels.register("alloc")
def alloc(numel, dtype):
    return np.empty(numel, dtype.np)


@kernels.register("from_host")
def from_host(array):
    return np.ascontiguousarray(array).reshape(-1)


@kernels.register("to_host")
def to_host(buf):
    return buf


def numpy_view(buf, layout):
    """A numpy array showing ``layout`` over the 1-D buffer ``buf`` (no copy)."""
    base = buf[layout.offset:] if layout.offset else buf
    item = buf.itemsize
    return np.lib.stride_tricks.as_strided(base, shape=tuple(layout.shape),
                                           strides=tuple(s * item for s in layout.strides))
