"""One thread setting for every pool minidl computes with: Numba's and the BLAS library's.

The setting is, first found: ``set_num_threads(n)``; ``MINIDL_NUM_THREADS``; ``OMP_NUM_THREADS`` (torch's
convention); the cores this process may run on. Under mpiexec each rank takes its share of the host's cores instead,
unless one of these chose a count (``minidl/dist/launch.py``).

A kernel uses more than one thread only for work large enough to pay for it when the machine is busy. Threads of a
parallel kernel wait for each other at its end, and on a loaded machine one of them is often descheduled for a whole
time slice of the scheduler (milliseconds): a kernel shorter than that can take several times longer with two
threads than with one. So the Numba kernels go parallel from ``kernels/cpu/strided.py``'s ``PARALLEL_MIN`` elements,
and a matrix product hands the BLAS library its threads only from ``BLAS_PARALLEL_MIN`` multiply-adds; below that it
runs on one (OpenBLAS's own cut-off, 2^18, is far lower). The BLAS library's thread count is a global of the
process, so a numpy call of the user's runs with what minidl's last product set.
``benchmarks/threads_under_load.py`` measures both choices beside torch at loads 0, 2 and 6 (benchmarks/README.md).
"""
from __future__ import annotations

import numbers
import os
import warnings

import numba
from threadpoolctl import ThreadpoolController

# Numba's OpenMP layer spins badly when cores are shared (MPI ranks, a busy machine); its own
# workqueue pool behaves. Chosen here, at import, because the first parallel kernel *or* the
# first numba.set_num_threads() starts the pool with whatever layer is set then.
# NUMBA_THREADING_LAYER still overrides.
if "NUMBA_THREADING_LAYER" not in os.environ:
    numba.config.THREADING_LAYER = "workqueue"

_blas = None        # threadpoolctl's handles on the BLAS libraries numpy loaded, made at the first product
_blas_threads = None  # what they were last given


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask, which taskset and containers narrow)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def requested_threads():
    """The count the environment asks for (``MINIDL_NUM_THREADS``, else ``OMP_NUM_THREADS``'s first level), or
    None. A value that is not a positive integer is ignored with a warning naming it, as OpenMP ignores one."""
    for name in ("MINIDL_NUM_THREADS", "OMP_NUM_THREADS"):
        value = os.environ.get(name, "").split(",")[0].strip()
        if value:
            if value.isdigit() and int(value) > 0:
                return int(value)
            warnings.warn(f"{name}={os.environ[name]!r} is not a positive number of threads: ignored", stacklevel=2)
    return None


def blas_parallel_min() -> int:
    """``MINIDL_BLAS_PARALLEL_MIN`` where set (0 hands every product to BLAS with the setting's threads, as minidl
    did before: the better choice on a many-core machine that is never busy), else 2^30: about 30 ms on one core
    of the 2-core EPYC VM it was measured on, the size from which two threads beat one at loads 2 and 6 too; below
    it, a descheduled peer cost up to 30 ms a product there (benchmarks/README.md, "Threads on a busy machine")."""
    value = os.environ.get("MINIDL_BLAS_PARALLEL_MIN", "").strip()
    if value.isdigit():
        return int(value)
    if value:
        warnings.warn(f"MINIDL_BLAS_PARALLEL_MIN={value!r} is not a number of multiply-adds: ignored", stacklevel=2)
    return 1 << 30


def set_num_threads(n: int) -> None:
    """Use at most ``n`` threads in minidl's kernels and the BLAS library (as torch.set_num_threads). The count
    stays the user's: a launcher's suggestion (``set_default_threads``) no longer changes it."""
    global _chosen
    if isinstance(n, bool) or not isinstance(n, numbers.Integral):
        raise RuntimeError(f"set_num_threads expects an int, but got {type(n).__name__}")  # (torch's error)
    if n < 1:
        raise RuntimeError(f"set_num_threads expects a positive integer, got {n}")
    _apply(int(n))
    _chosen = True


def set_default_threads(n: int) -> None:
    """A count suggested by a launcher (a rank's share of its host's cores), taken only where neither
    ``set_num_threads`` nor the environment chose one."""
    if not _chosen:
        _apply(n)


def _apply(n: int) -> None:
    global _threads
    _threads = min(n, numba.config.NUMBA_NUM_THREADS)
    use_blas_threads(BLAS_PARALLEL_MIN)  # now, for numpy calls of the user's too (until minidl's next product)


def get_num_threads() -> int:
    return _threads


def use_numba_threads() -> None:
    """Before a parallel Numba kernel: its pool takes the setting's threads. Numba keeps the count per calling
    thread, and starts its pool at the first call, so this runs here rather than at import or in
    ``set_num_threads``."""
    if numba.get_num_threads() != _threads:
        numba.set_num_threads(_threads)


def use_blas_threads(work: int) -> None:
    """Before a BLAS call of ``work`` multiply-adds: give the library the setting's threads, or one below
    ``BLAS_PARALLEL_MIN``. The count is a global of the library's, changed only when it differs."""
    global _blas, _blas_threads
    n = _threads if work >= BLAS_PARALLEL_MIN else 1
    if n != _blas_threads:
        if _blas is None:
            _blas = ThreadpoolController().select(user_api="blas").lib_controllers
        for library in _blas:
            library.set_num_threads(n)
        _blas_threads = n


BLAS_PARALLEL_MIN = blas_parallel_min()
_chosen = requested_threads() is not None   # did the user or the environment choose the count?
_threads = min(requested_threads() or usable_cores(), numba.config.NUMBA_NUM_THREADS)
