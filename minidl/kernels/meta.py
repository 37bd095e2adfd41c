"""The meta device's kernels: every primitive, computing nothing (torch's ``device='meta'``).

An op on meta tensors runs its own shape, dtype and argument logic as on any device and launches these, so it
returns meta tensors of the right shapes without touching memory: a model built on 'meta' costs neither (and
``nn.Module.to_empty`` gives it memory later). A buffer is a :class:`Buffer`, which holds no element; the
kernels that would hand elements out (``to_host``, ``share_memory``, ``nonzero``, whose size is data) raise torch's
errors instead, so that a meta tensor never yields a value.
"""
from __future__ import annotations

import numpy as np

from .. import kernels

NO_DATA = "Cannot copy out of meta tensor; no data!"


class Buffer:
    """Stands in for a flat buffer of ``size`` elements of the numpy ``dtype``: what code asks a buffer about its
    extent (size, nbytes, a slice) it answers; anything that would read an element raises."""

    __slots__ = ("size", "dtype")

    def __init__(self, size: int, dtype):
        self.size, self.dtype = int(size), np.dtype(dtype)

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def __getitem__(self, index):
        if not isinstance(index, slice):
            raise NotImplementedError(NO_DATA)
        return Buffer(len(range(*index.indices(self.size))), self.dtype)

    def __array__(self, *args, **kwargs):
        raise NotImplementedError(NO_DATA)

    def __repr__(self):
        return f"meta.Buffer(size={self.size}, dtype={self.dtype})"


def _nothing(*args, **kwargs):
    """The primitives that only write into the buffers they are given: nothing to write. (The ones below, which
    return a buffer or would hand values out, replace it.)"""


for _name in kernels.PRIMITIVES:
    kernels.register(_name, "meta")(_nothing)


@kernels.register("alloc", "meta")
def alloc(numel, dtype):
    return Buffer(numel, dtype.np)


@kernels.register("from_host", "meta")
def from_host(array):
    return Buffer(array.size, array.dtype)   # (copying into meta keeps nothing, as torch's)


@kernels.register("to_host", "meta")
def to_host(buf):
    raise NotImplementedError(NO_DATA)


@kernels.register("share_memory", "meta")
def share_memory(buf):
    raise RuntimeError("share_memory_: only available on CPU and CUDA (a meta tensor has no memory to share)")


@kernels.register("open_shared", "meta")
def open_shared(handle):
    raise RuntimeError("open_shared: a meta tensor has no memory to share")


@kernels.register("nonzero", "meta")
def nonzero(x, x_layout):
    raise NotImplementedError("nonzero: the number of nonzero elements of a meta tensor is unknown (it has no "
                              "data), and so is the shape of what depends on it")


@kernels.register("fused", "meta")
def fused(program, shape, operands, eshape=None):
    def launch(*buffers):
        pass
    launch.device_type = "meta"
    return launch
