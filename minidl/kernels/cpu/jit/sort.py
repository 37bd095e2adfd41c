"""The stable argsort of rows, NaN counted as the largest value."""
import numpy as np
from numba import njit, prange

from .rows import row_position


@njit(inline="always")
def _argsort_row(x, px, n, s, descending, out, po, so):
    """The stable sort order of the n values x[px + j*s], written to out[po + j*so]: ascending with
    NaNs last, or descending with NaNs first (NaN counts as the largest value, as in PyTorch).
    Descending reads the row backwards, sorts ascending and writes backwards, so ties keep their order."""
    keys = np.empty(n, x.dtype)
    pos = np.empty(n, np.int64)
    m = 0
    for j in range(n):
        i = n - 1 - j if descending else j
        v = x[px + i * s]
        if v == v:
            keys[m] = v
            pos[m] = i
            m += 1
    order = np.argsort(keys[:m], kind="mergesort")
    first = n - m if descending else 0
    for j in range(m):
        out[po + (first + j) * so] = pos[order[m - 1 - j]] if descending else pos[order[j]]
    k = 0 if descending else m
    for i in range(n):
        v = x[px + i * s]
        if v != v:
            out[po + k * so] = i
            k += 1


@njit(cache=True, nogil=True)
def argsort_serial(x, xo, oshape, xstrides, out, ostrides, n, xs, os, descending):
    for r in range(out.size // n):
        _argsort_row(x, row_position(r, oshape, xstrides, xo), n, xs, descending, out,
                     row_position(r, oshape, ostrides, 0), os)


@njit(cache=True, nogil=True, parallel=True)
def argsort_parallel(x, xo, oshape, xstrides, out, ostrides, n, xs, os, descending):
    for r in prange(out.size // n):
        _argsort_row(x, row_position(r, oshape, xstrides, xo), n, xs, descending, out,
                     row_position(r, oshape, ostrides, 0), os)
