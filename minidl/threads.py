"""One knob for every thread pool minidl uses: Numba's and the BLAS library's."""
from __future__ import annotations

import os

import numba
from threadpoolctl import threadpool_limits

# Numba's OpenMP layer spins badly when cores are shared (MPI ranks, a busy machine); its own
# workqueue pool behaves. Chosen here, at import, because the first parallel kernel *or* the
# first numba.set_num_threads() starts the pool with whatever layer is set then.
# NUMBA_THREADING_LAYER still overrides.
if "NUMBA_THREADING_LAYER" not in os.environ:
    numba.config.THREADING_LAYER = "workqueue"

_threads = numba.config.NUMBA_NUM_THREADS
_blas_limit = None


def set_num_threads(n: int) -> None:
    global _threads, _blas_limit
    n = int(n)
    if n < 1:
        raise ValueError(f"set_num_threads: expected a positive number of threads, got {n}")
    _threads = min(n, numba.config.NUMBA_NUM_THREADS)
    numba.set_num_threads(_threads)
    _blas_limit = threadpool_limits(limits=n, user_api="blas")


def get_num_threads() -> int:
    return _threads
