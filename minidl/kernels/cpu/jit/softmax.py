"""(Log-)softmax and its gradient over packed rows of n elements.

The rows r0 .. r1 - 1 of a block at a time, so that exp runs as one vectorised pass over the
block (``tmp`` is a scratch buffer of the same size as ``out``).
"""
import math

from numba import njit, prange

from .rows import CHUNK
from .vector_math import dot_run, exp_run, sum_run


@njit(inline="always")
def _row_max(x):
    """Max of a row; NaN if it holds one (then the whole row's softmax is NaN, as in PyTorch)."""
    m = x[0]
    for j in range(1, x.size):
        v = x[j]
        if v > m or v != v:
            m = v
    return m


@njit(inline="always")
def _softmax_rows(x, out, tmp, r0, r1, n, log, zero):
    for r in range(r0, r1):
        row, shifted = x[r * n:(r + 1) * n], out[r * n:(r + 1) * n]
        m = _row_max(row)
        for j in range(n):
            shifted[j] = row[j] - m
    exp_run(out[r0 * n:r1 * n], tmp[r0 * n:r1 * n])
    for r in range(r0, r1):
        e, y = tmp[r * n:(r + 1) * n], out[r * n:(r + 1) * n]
        s = sum_run(e, zero)
        if log:
            ls = math.log(s)
            for j in range(n):
                y[j] = y[j] - ls
        else:
            for j in range(n):
                y[j] = e[j] / s


@njit(inline="always")
def _softmax_backward_rows(y, g, out, tmp, r0, r1, n, log, zero):
    if log:
        exp_run(y[r0 * n:r1 * n], tmp[r0 * n:r1 * n])
    for r in range(r0, r1):
        yr, gr, o = y[r * n:(r + 1) * n], g[r * n:(r + 1) * n], out[r * n:(r + 1) * n]
        if log:
            s = sum_run(gr, zero)
            e = tmp[r * n:(r + 1) * n]
            for j in range(n):
                o[j] = gr[j] - e[j] * s
        else:
            s = dot_run(gr, yr, zero)
            for j in range(n):
                o[j] = yr[j] * (gr[j] - s)


@njit(cache=True, nogil=True)
def softmax_serial(x, out, tmp, rows, n, log, zero, blocks):
    step = max(1, CHUNK // n)                   # blocks of rows that stay in cache across passes
    for r in range(0, rows, step):
        _softmax_rows(x, out, tmp, r, min(rows, r + step), n, log, zero)


@njit(cache=True, nogil=True, parallel=True)
def softmax_parallel(x, out, tmp, rows, n, log, zero, blocks):
    for b in prange(blocks):
        _softmax_rows(x, out, tmp, rows * b // blocks, rows * (b + 1) // blocks, n, log, zero)


@njit(cache=True, nogil=True)
def softmax_backward_serial(y, g, out, tmp, rows, n, log, zero, blocks):
    step = max(1, CHUNK // n)
    for r in range(0, rows, step):
        _softmax_backward_rows(y, g, out, tmp, r, min(rows, r + step), n, log, zero)


@njit(cache=True, nogil=True, parallel=True)
def softmax_backward_parallel(y, g, out, tmp, rows, n, log, zero, blocks):
    for b in prange(blocks):
        _softmax_backward_rows(y, g, out, tmp, rows * b // blocks, rows * (b + 1) // blocks, n, log, zero)
