"""The ``random`` and ``dropout`` primitives on the GPU (csrc/random.cu): one Philox evaluation per element, no host
data."""
import numpy as np

from .... import kernels
from ...checks import dropout_arguments, random_arguments, random_span, random_stream
from .. import runtime
from .common import kernel


def _refuse_during_capture():
    runtime.refuse_during_capture("random number generation", "the generator's state is a kernel argument, so "
                                  "every replay would repeat the numbers drawn at capture")


@kernels.register("random", "cuda")
def random(kind, out, seed, offset, a, b):
    random_arguments(kind, out, a, b)
    _refuse_during_capture()
    seed, offset = random_stream(seed, offset)
    n = runtime.i64(out.size)
    if kind == "integers":
        runtime.launch(kernel("random", "random_integers", out.dtype), out.size, out, n, seed, offset,
                       np.int64(a), random_span(kind, a, b))
    else:
        runtime.launch(kernel("random", f"random_{kind}", out.dtype), out.size, out, n, seed, offset,
                       np.float64(a), np.float64(b))


@kernels.register("dropout", "cuda")
def dropout(x, out, mask, p, seed, offset):
    keep, scale = dropout_arguments(x, out, mask, p)
    _refuse_during_capture()
    runtime.launch(kernel("random", "dropout", x.dtype), x.size, x, out, mask, runtime.i64(x.size),
                   *random_stream(seed, offset), keep, scale)
