"""Softmax and log-softmax over packed rows on the CPU (kernels in ``jit/softmax.py``): one pass per row
instead of the five elementwise ops and two reductions of the composed formula."""
import numpy as np

from ... import kernels
from ..checks import softmax_rows
from .jit.softmax import softmax_backward_parallel, softmax_backward_serial, softmax_parallel, softmax_serial
from .strided import launch

_BLOCK = 1 << 14          # elements per parallel work block (whole rows)


def _rows(name, n, *bufs):
    """(rows, parallel work blocks of whole rows)."""
    rows = softmax_rows(name, n, *bufs)
    return rows, max(1, min(rows, bufs[0].size // _BLOCK))


@kernels.register("softmax")
def softmax(x, out, n, log):
    rows, blocks = _rows("softmax", int(n), x, out)
    if rows:
        launch(softmax_serial, softmax_parallel, x.size, x, out, np.empty_like(out), rows, int(n), bool(log),
               x.dtype.type(0), blocks)


@kernels.register("softmax_backward")
def softmax_backward(y, g, out, n, log):
    rows, blocks = _rows("softmax_backward", int(n), y, g, out)
    if rows:
        launch(softmax_backward_serial, softmax_backward_parallel, y.size, y, g, out, np.empty_like(out),
               rows, int(n), bool(log), y.dtype.type(0), blocks)
