"""The ``random`` and ``dropout`` primitives on the GPU (csrc/random.cu): one Philox evaluation per element, no host
data."""
import numpy as np

from .... import kernels
from ...checks import device_stream, dropout_arguments, random_arguments, random_span
from .. import runtime
from .common import kernel


def stream(name, seed, offset):
    """The kernels' (seed, offset, state) arguments; a draw whose state is a kernel argument cannot be captured
    (every replay would repeat its numbers), one reading a state buffer can."""
    seed, offset, state = device_stream(seed, offset, runtime.NULL, name)
    if state is runtime.NULL:
        runtime.refuse_during_capture(f"{name} with the generator's state as an argument",
                                      "every replay would repeat the numbers drawn at capture; pass the state "
                                      "as a device buffer (seed=state, offset=delta)")
    return seed, offset, state


@kernels.register("random", "cuda")
def random(kind, out, seed, offset, a, b):
    random_arguments(kind, out, a, b)
    philox = stream("random number generation", seed, offset)
    n = runtime.i64(out.size)
    if kind == "integers":
        runtime.launch(kernel("random", "random_integers", out.dtype), out.size, out, n, *philox,
                       np.int64(a), random_span(kind, a, b))
    else:
        runtime.launch(kernel("random", f"random_{kind}", out.dtype), out.size, out, n, *philox,
                       np.float64(a), np.float64(b))


@kernels.register("dropout", "cuda")
def dropout(x, out, mask, p, seed, offset):
    keep, scale = dropout_arguments(x, out, mask, p)
    philox = stream("dropout", seed, offset)
    runtime.launch(kernel("random", "dropout", x.dtype), x.size, x, out, mask, runtime.i64(x.size), *philox,
                   keep, scale)
