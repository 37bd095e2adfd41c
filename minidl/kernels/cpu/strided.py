"""Shared pieces of the CPU wrappers: how work is split and when threads are used.

A kernel sees an operand as (buffer, offset, strides) over a common shape that
``layout.collapse`` has already squeezed to as few dims as possible. The work
is cut into *items*: one chunk of at most ``CHUNK`` elements of one row (a row
is the last dim), so a long 1-D loop still spreads over threads.
"""
import threading

import numpy as np

from ... import threads
from .jit.rows import CHUNK

# below this many elements (units of work) a kernel runs on the calling thread: inside a training
# step each parallel launch wakes the pool's sleeping workers (~50-90 µs on a small VM), which
# only pays off for multi-millisecond kernels (see benchmarks/README.md)
PARALLEL_MIN = 1 << 22
_parallel_lock = threading.Lock()


def launch(serial, parallel, numel, *args):
    """Run ``parallel`` for large work with more than one thread, else ``serial``.

    With one thread the serial kernel skips the hand-off to Numba's pool (~40 µs a launch on
    a small VM). Numba's workqueue thread pool must not be entered by two threads at once, so
    a thread that finds it busy (say, a communication thread beside backward) runs serially.
    """
    if numel >= PARALLEL_MIN and threads.get_num_threads() > 1 and _parallel_lock.acquire(blocking=False):
        try:
            threads.use_numba_threads()
            return parallel(*args)
        finally:
            _parallel_lock.release()
    return serial(*args)


def work_items(shape) -> int:
    inner = shape[-1]
    rows = 1
    for n in shape[:-1]:
        rows *= n
    return rows * ((inner + CHUNK - 1) // CHUNK)


def i64(values) -> np.ndarray:
    return np.array(values, dtype=np.int64)
