"""The ``random`` primitive on the CPU (kernels in random_jit.py)."""
import numpy as np

from .. import kernels
from .jit import CHUNK
from .random_jit import random_parallel, random_serial
from .strided import launch, work_items

_KINDS = {kind: i for i, kind in enumerate(kernels.RANDOM_KINDS)}
_NORMAL_COST = 20  # ns an element, against ~1 for the other kinds (vectorised)
_OUT_DTYPES = {"uniform": ("float32", "float64"), "normal": ("float32", "float64"), "integers": ("int64",)}


def check(kind, out, a, b):
    """The argument checks both devices share; returns the kind's code."""
    if kind not in _KINDS:
        raise ValueError(f"random: unknown kind {kind!r}; expected one of {kernels.RANDOM_KINDS}")
    if out.dtype.name not in _OUT_DTYPES[kind]:
        raise TypeError(f"random: kind {kind!r} fills {' or '.join(_OUT_DTYPES[kind])} buffers, not {out.dtype.name}")
    if kind == "integers" and not a < b:
        raise ValueError(f"random: integers need low < high, got [{a}, {b})")
    return _KINDS[kind]


def span(kind, a, b) -> np.uint64:
    """b - a as the kernels' unsigned 64-bit range (0 for the whole range, and for float kinds)."""
    return np.uint64((int(b) - int(a)) % (1 << 64) if kind == "integers" else 0)


@kernels.register("random")
def random(kind, out, seed, offset, a, b):
    code = check(kind, out, a, b)
    width = span(kind, a, b)
    a, b = (np.int64(a), np.int64(0)) if code == 2 else (np.float64(a), np.float64(b))
    work = out.size * (_NORMAL_COST if kind == "normal" else 1)  # threads pay off sooner for the normal's libm calls
    launch(random_serial, random_parallel, work, np.int64(code), out, np.uint64(seed % (1 << 64)),
           np.uint64(offset % (1 << 64)), a, b, width, np.int64(CHUNK), work_items((out.size,)))
