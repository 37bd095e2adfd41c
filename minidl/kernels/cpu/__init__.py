"""The CPU kernels: Numba implementations for every primitive in ``minidl.kernels``.

Importing this package registers them. Kernels compile lazily on first use
and are cached on disk (``cache=True``) in a per-user folder (``kernel_cache``),
so later processes, other clones and other virtual environments load them.
Numba's threading layer is chosen in ``minidl.threads``, at ``import minidl``.
"""
from . import kernel_cache

kernel_cache.install()  # before the kernel modules: their decorators pick the cache's locator

from . import (attention, batch_norm, conv, cross_entropy, elementwise, fused, indexing,  # noqa: E402,F401
               linalg, memory, norm_rows, optim, random, reduce, rnn, shared, softmax)
