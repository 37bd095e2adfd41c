"""The ``random`` primitive on the GPU (csrc/random.cu): one Philox evaluation per element, no host data."""
import numpy as np

from ... import kernels
from ...cpu.random import check, span
from .. import runtime
from .common import kernel


@kernels.register("random", "cuda")
def random(kind, out, seed, offset, a, b):
    check(kind, out, a, b)
    seed, offset = np.uint64(seed % (1 << 64)), np.uint64(offset % (1 << 64))
    n = runtime.i64(out.size)
    if kind == "integers":
        runtime.launch(kernel("random", "random_integers", out.dtype), out.size, out, n, seed, offset,
                       np.int64(a), span(kind, a, b))
    else:
        runtime.launch(kernel("random", f"random_{kind}", out.dtype), out.size, out, n, seed, offset,
                       np.float64(a), np.float64(b))
