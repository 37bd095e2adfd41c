"""The CPU backend: Numba kernels for every primitive in ``minidl.kernels``.

Importing this package registers them. Kernels compile lazily on first use
and are cached on disk (``cache=True``), so later processes load them.
"""
import os

import numba

# Numba's OpenMP layer spins badly when cores are shared (MPI ranks, a busy machine);
# its own workqueue pool behaves. NUMBA_THREADING_LAYER still overrides.
if "NUMBA_THREADING_LAYER" not in os.environ:
    numba.config.THREADING_LAYER = "workqueue"

from . import conv, elementwise, indexing, linalg, memory, reduce  # noqa: E402,F401  (registration)
