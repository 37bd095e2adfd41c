"""Shared pieces of every CPU kernel: work splitting and row positions.

A kernel sees an operand as (buffer, offset, strides) over a common shape that
``layout.collapse`` has already squeezed to as few dims as possible. The work
is cut into *items*: one chunk of at most ``CHUNK`` elements of one row (a row
is the last dim), so a long 1-D loop still spreads over threads.
"""
import threading

import numpy as np
from numba import njit

CHUNK = 4096
# below this many elements a kernel runs on the calling thread (see benchmarks/README.md)
PARALLEL_MIN = 1 << 18
_parallel_lock = threading.Lock()


def launch(serial, parallel, numel, *args):
    """Run ``parallel`` for large work, else ``serial``.

    Numba's workqueue thread pool must not be entered by two threads at once, so a
    thread that finds it busy (say, a communication thread beside backward) runs serially.
    """
    if numel >= PARALLEL_MIN and _parallel_lock.acquire(blocking=False):
        try:
            return parallel(*args)
        finally:
            _parallel_lock.release()
    return serial(*args)


@njit(inline="always")
def row_position(row, shape, strides, offset):
    """Buffer position of element 0 of the ``row``-th row (rows run over all dims but the last)."""
    pos = offset
    rest = row + 0  # a new value: ``row`` may be a prange index, which Numba forbids overwriting
    for d in range(shape.size - 2, -1, -1):
        n = shape[d]
        pos += (rest % n) * strides[d]
        rest //= n
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
