"""Gather/scatter CPU kernels over flat (row-major) element indices.

Every indexing op in ``minidl/ops/indexing.py`` reduces to these: the op turns
its index expression into flat indices of the source's logical shape, and the
kernel maps each flat index through the source layout to a buffer position.
Indices are validated by the op before a kernel runs: Numba does not check.
"""
import numpy as np
from numba import njit, prange

from .. import kernels
from .strided import i64, launch


@njit(inline="always")
def _flat_position(flat, shape, strides, offset):
    pos = offset
    rest = flat + 0
    for d in range(shape.size - 1, -1, -1):
        n = shape[d]
        pos += (rest % n) * strides[d]
        rest //= n
    return pos


@njit(cache=True, nogil=True)
def take_serial(src, so, shape, strides, index, out):
    for i in range(index.size):
        out[i] = src[_flat_position(index[i], shape, strides, so)]


@njit(cache=True, nogil=True, parallel=True)
def take_parallel(src, so, shape, strides, index, out):
    for i in prange(index.size):
        out[i] = src[_flat_position(index[i], shape, strides, so)]


@njit(cache=True, nogil=True)
def put_kernel(dst, do, shape, strides, index, values, accumulate):
    """Serial on purpose: duplicate indices must accumulate without races."""
    for i in range(index.size):
        p = _flat_position(index[i], shape, strides, do)
        if accumulate:
            dst[p] += values[i]
        else:
            dst[p] = values[i]


@njit(cache=True, nogil=True)
def nonzero_kernel(x, xo, shape, strides, n):
    count = 0
    for i in range(n):
        if x[_flat_position(i, shape, strides, xo)]:
            count += 1
    out = np.empty(count, np.int64)
    k = 0
    for i in range(n):
        if x[_flat_position(i, shape, strides, xo)]:
            out[k] = i
            k += 1
    return out


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
