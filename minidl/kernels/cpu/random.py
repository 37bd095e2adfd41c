"""The ``random`` and ``dropout`` primitives on the CPU (kernels in ``jit/random.py``)."""
import numpy as np

from ... import kernels
from ..checks import dropout_arguments, random_arguments, random_span, random_stream
from .jit.random import dropout_parallel, dropout_serial, random_parallel, random_serial
from .jit.rows import CHUNK
from .strided import launch, work_items

_NORMAL_COST = 20  # ns an element, against ~1 for the other kinds (vectorised)


@kernels.register("random")
def random(kind, out, seed, offset, a, b):
    code = random_arguments(kind, out, a, b)
    width = random_span(kind, a, b)
    a, b = (np.int64(a), np.int64(0)) if code == 2 else (np.float64(a), np.float64(b))
    work = out.size * (_NORMAL_COST if kind == "normal" else 1)  # threads pay off sooner for the normal's libm calls
    launch(random_serial, random_parallel, work, np.int64(code), out, *random_stream(seed, offset), a, b, width,
           np.int64(CHUNK), work_items((out.size,)))


@kernels.register("dropout")
def dropout(x, out, mask, p, seed, offset):
    keep, scale = dropout_arguments(x, out, mask, p)
    launch(dropout_serial, dropout_parallel, x.size, x, out, mask, keep, scale, *random_stream(seed, offset, "dropout"),
           np.int64(CHUNK), work_items((x.size,)))
