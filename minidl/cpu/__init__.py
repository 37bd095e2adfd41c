"""The CPU backend: Numba kernels for every primitive in ``minidl.kernels``.

Importing this package registers them. Kernels compile lazily on first use
and are cached on disk (``cache=True``), so later processes load them.
Numba's threading layer is chosen in ``minidl.threads``, at ``import minidl``.
"""
from . import conv, elementwise, indexing, linalg, memory, optim, random, reduce, shared, softmax  # noqa: F401
