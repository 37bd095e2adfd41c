"""The ``random`` primitive on the GPU (csrc/random.cu): one Philox evaluation per element, no host data."""
import numpy as np

from .... import kernels
from ...checks import random_arguments, random_span, random_stream
from .. import runtime
from .common import kernel


@kernels.register("random", "cuda")
def random(kind, out, seed, offset, a, b):
    random_arguments(kind, out, a, b)
    runtime.refuse_during_capture("random number generation", "the generator's state is a kernel argument, so "
                                  "every replay would repeat the numbers drawn at capture")
    seed, offset = random_stream(seed, offset)
    n = runtime.i64(out.size)
    if kind == "integers":
        runtime.launch(kernel("random", "random_integers", out.dtype), out.size, out, n, seed, offset,
                       np.int64(a), random_span(kind, a, b))
    else:
        runtime.launch(kernel("random", f"random_{kind}", out.dtype), out.size, out, n, seed, offset,
                       np.float64(a), np.float64(b))
