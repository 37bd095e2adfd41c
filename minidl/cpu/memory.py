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
