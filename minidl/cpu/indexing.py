"""Gather/scatter primitives on the CPU over flat (row-major) element indices (kernels in ``jit.py``).

Every indexing op in ``minidl/ops/indexing.py`` reduces to these: the op turns
its index expression into flat indices of the source's logical shape, and the
kernel maps each flat index through the source layout to a buffer position.
Indices are validated by the op before a kernel runs: Numba does not check.
"""
import numpy as np

from .. import kernels
from .jit import nonzero_kernel, put_kernel, take_parallel, take_serial
from .strided import i64, launch


@kernels.register("take")
def take(src, sl, index, out):
    if index.size == 0:
        return
    launch(take_serial, take_parallel, index.size, src, sl.offset, i64(sl.shape), i64(sl.strides), index, out)


@kernels.register("put")
def put(dst, dl, index, values, accumulate):
    if index.size:
        put_kernel(dst, dl.offset, i64(dl.shape), i64(dl.strides), index, values, accumulate)


@kernels.register("nonzero")
def nonzero(x, xl):
    if xl.numel == 0:
        return np.empty(0, np.int64)
    return nonzero_kernel(x, xl.offset, i64(xl.shape), i64(xl.strides), xl.numel)
