"""Shared pieces of every CPU kernel: work splitting and row positions.

A kernel sees an operand as (buffer, offset, strides) over a common shape that
``layout.collapse`` has already squeezed to as few dims as possible. The work
is cut into *items*: one chunk of at most ``CHUNK`` elements of one row (a row
is the last dim), so a long 1-D loop still spreads over threads.
"""
import numpy as np
from numba import njit

CHUNK = 4096
# below this many elements a kernel runs on the calling thread
PARALLEL_MIN = 1 << 15


@njit(inline="always")
def row_position(row, shape, strides, offset):
    """Buffer position of element 0 of the ``row``-th row (rows run over all dims but the last)."""
    pos = offset
    for d in range(shape.size - 2, -1, -1):
        n = shape[d]
        pos += (row % n) * strides[d]
        row //= n
    return pos


@njit(inline="always")
def item_bounds(t, shape):
    """(row, first column, end column) of work item ``t``."""
    inner = shape[shape.size - 1]
    nchunks = (inner + CHUNK - 1) // CHUNK
    row = t // nchunks
    lo = (t % nchunks) * CHUNK
    return row, lo, min(inner, lo + CHUNK)


def work_items(shape) -> int:
    inner = shape[-1]
    rows = 1
    for n in shape[:-1]:
        rows *= n
    return rows * ((inner + CHUNK - 1) // CHUNK)


def i64(values) -> np.ndarray:
    return np.array(values, dtype=np.int64)
