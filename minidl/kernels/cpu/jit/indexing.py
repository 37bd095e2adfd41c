"""Gather and scatter by flat index (take, put), index checks and nonzero."""
import numpy as np
from numba import njit, prange

from .rows import flat_position


# take and put check every flat index against the element count n and skip bad ones, returning
# how many there were (the wrapper raises IndexError); put checks them all before writing any.
@njit(inline="always")
def _take_one(src, so, shape, strides, n, index, out, i):
    """Gather element i; 1 when its index is out of range (then nothing is read), else 0."""
    f = index[i]
    if f < 0 or f >= n:
        return 1
    out[i] = src[flat_position(f, shape, strides, so)]
    return 0


@njit(cache=True, nogil=True)
def take_serial(src, so, shape, strides, n, index, out):
    bad = 0
    for i in range(index.size):
        bad += _take_one(src, so, shape, strides, n, index, out, i)
    return bad


@njit(cache=True, nogil=True, parallel=True)
def take_parallel(src, so, shape, strides, n, index, out):
    bad = 0
    for i in prange(index.size):
        bad += _take_one(src, so, shape, strides, n, index, out, i)
    return bad


@njit(cache=True, nogil=True)
def check_index_kernel(index, size, stride, wrap, out):
    """out = stride * index (+ size where negative, when wrap); the position of the first index
    out of range, or -1."""
    bad = -1
    for i in range(index.size):
        v = index[i]
        w = v + size if wrap and v < 0 else v
        if (w < 0 or w >= size) and bad < 0:
            bad = i
        out[i] = w * stride
    return bad


@njit(cache=True, nogil=True)
def put_kernel(dst, do, shape, strides, n, index, values, accumulate):
    """Serial on purpose: duplicate indices must accumulate without races."""
    for i in range(index.size):
        if index[i] < 0 or index[i] >= n:
            return 1
    for i in range(index.size):
        p = flat_position(index[i], shape, strides, do)
        if accumulate:
            dst[p] += values[i]
        else:
            dst[p] = values[i]
    return 0


@njit(cache=True, nogil=True)
def nonzero_kernel(x, xo, shape, strides, n):
    count = 0
    for i in range(n):
        if x[flat_position(i, shape, strides, xo)]:
            count += 1
    out = np.empty(count, np.int64)
    k = 0
    for i in range(n):
        if x[flat_position(i, shape, strides, xo)]:
            out[k] = i
            k += 1
    return out
