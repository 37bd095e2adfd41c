"""How a process finds out it was started by mpiexec (or as torch's launchers start ranks), and how many threads
each rank may use."""
from __future__ import annotations

import os
import sys

# set by MPICH/Hydra (PMI_*), PMIx launchers, Open MPI and MVAPICH
_LAUNCH_VARS = ("PMI_RANK", "PMI_SIZE", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")


def find_mpiexec():
    """The mpiexec beside this Python (the ``mpich`` wheel installs one into the environment's
    bin/, found even when the environment is not activated), else the one on PATH, else None."""
    import shutil
    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return beside if os.access(beside, os.X_OK) else shutil.which("mpiexec")


# the rank each launcher gives a process, in the order of _LAUNCH_VARS
_RANK_VARS = ("PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK", "MV2_COMM_WORLD_RANK")


def launch_rank() -> int:
    """This process's rank as the launcher set it (mpiexec's, else torch's RANK; 0 when neither), readable
    before ``init_process_group``: so that only rank 0 reports a bad command line."""
    for name in _RANK_VARS + ("RANK",):
        if name in os.environ:
            return int(os.environ[name])
    return 0


def launched_by_env() -> bool:
    """Started as torch's launchers start ranks: RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set (env://)."""
    return all(os.environ.get(v) for v in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"))


def launched_by_mpi() -> bool:
    if any(v in os.environ for v in _LAUNCH_VARS):
        return True
    mpi = sys.modules.get("mpi4py.MPI")  # MPI already started by the user's script
    return mpi is not None and mpi.Is_initialized() and mpi.COMM_WORLD.Get_size() > 1


def fit_threads_to_cores(ranks_on_host: int) -> None:
    """Give each rank its share of this host's cores for compute (the BLAS library's and Numba's
    threads): cores // ranks on the host, at least 1, unless ``set_num_threads``, ``MINIDL_NUM_THREADS`` or
    ``OMP_NUM_THREADS`` chose a count (``minidl/threads.py``). A rank that kept a pool as wide as the
    machine fought the other ranks' pools for the cores: on 2 cores, 2 ranks trained 8x slower than with a
    thread each. The communication thread is not counted: its waits sleep (only a blocking call's own wait,
    on the compute thread, polls back to back)."""
    from .. import threads
    if ranks_on_host > 1:
        threads.set_default_threads(max(1, threads.usable_cores() // ranks_on_host))
