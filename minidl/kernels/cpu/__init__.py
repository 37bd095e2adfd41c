"""The CPU kernels: Numba implementations for every primitive in ``minidl.kernels``.

Importing this package registers them. Kernels compile lazily on first use
and are cached on disk (``cache=True``) in a per-user folder (``kernel_cache``),
so later processes, other clones and other virtual environments load them.
Numba's threading layer is chosen in ``minidl.threads``, at ``import minidl``.
"""
from . import kernel_cache

kernel_cache.install()  # before the kernel modules: their decorators pick the cache's locator

from . import (attention, conv, elementwise, indexing, linalg, memory, optim, random, reduce,  # noqa: E402,F401
               shared, softmax)
from . import cross_entropy  # noqa: E402,F401
