"""One knob for every thread pool minidl uses: Numba's and the BLAS library's."""
from __future__ import annotations

import numba
from threadpoolctl import threadpool_limits

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
