"""The communicators, by the backend names of ``init_process_group(backend=...)`` (PyTorch's word):
name -> the module that makes them.

A communicator module provides ``world_communicator(**options)`` returning the calling rank's
communicator over all ranks, and ``ONE_RANK_PER_PROCESS`` (if true, the default group belongs to
the process and ``abort_on_uncaught_exception()`` makes one rank's crash end the job).
"gloo" is minidl's own TCP transport (processes meeting through a store, no MPI). "nccl" moves CUDA
tensors (``TENSOR_DEVICE``); the others CPU tensors.
"""
from __future__ import annotations

import importlib

BACKENDS = {
    "gloo": "minidl.dist.communicators.socket",
    "mpi": "minidl.dist.communicators.mpi",
    "nccl": "minidl.dist.communicators.nccl",
    "sim": "minidl.dist.communicators.sim",
}
ALIASES = {}
TENSOR_DEVICE = {"nccl": "cuda"}  # the device type of the tensors a backend moves, where not "cpu"


def canonical(name: str) -> str:
    name = str(name).lower()
    name = ALIASES.get(name, name)
    if name not in BACKENDS:
        raise ValueError(f"init_process_group: unknown backend {name!r}; known: "
                         f"{', '.join(sorted(BACKENDS) + sorted(ALIASES))}")
    return name


def load(name: str):
    """The backend's module, imported only now (so mpi4py loads only when MPI is used)."""
    return importlib.import_module(BACKENDS[canonical(name)])
