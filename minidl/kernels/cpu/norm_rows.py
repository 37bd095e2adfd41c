"""Layer, RMS and group norm over packed rows on the CPU (kernels in ``jit/norm_rows.py``): statistics and the
affine output in one pass per row, and the input and parameter gradients in one pass back."""
import numpy as np

from ... import kernels
from ..checks import norm_rows_geometry
from .jit.norm_rows import norm_rows_backward_parallel, norm_rows_backward_serial, norm_rows_parallel, norm_rows_serial
from .strided import launch

_BLOCK = 1 << 16          # elements per parallel work block (whole rows)


def _blocks(rows, size):
    return max(1, min(rows, size // _BLOCK))


def _param(p, fill, count, dtype):
    """A missing weight (bias) as ones (zeros): one kernel per dtype, whatever the affine."""
    return np.full(count, fill, dtype) if p is None else p


@kernels.register("norm_rows")
def norm_rows(x, w, b, out, mean, rstd, n, span, cycle, eps, rms):
    n, span, cycle = int(n), int(span), int(cycle)
    rows = norm_rows_geometry("norm_rows", n, span, cycle, x, (w, b), output=(out, n), mean=(mean, 1),
                              rstd=(rstd, 1))
    if rows:
        count, t = cycle * (n // span), x.dtype.type
        launch(norm_rows_serial, norm_rows_parallel, x.size, x, _param(w, 1, count, x.dtype),
               _param(b, 0, count, x.dtype), out, mean, rstd, rows, n, span, cycle, t(eps), bool(rms), t(0),
               t(1 / n), _blocks(rows, x.size))


@kernels.register("norm_rows_backward")
def norm_rows_backward(x, w, mean, rstd, g, dx, dw, db, n, span, cycle, rms):
    n, span, cycle = int(n), int(span), int(cycle)
    rows = norm_rows_geometry("norm_rows_backward", n, span, cycle, x, (w, dw, db), mean=(mean, 1),
                              rstd=(rstd, 1), gradient=(g, n), dx=(dx, n))
    count = cycle * (n // span)
    blocks = _blocks(rows, x.size)
    pw, pb = np.zeros((2, blocks, count), x.dtype)
    if rows:
        t = x.dtype.type
        launch(norm_rows_backward_serial, norm_rows_backward_parallel, x.size, x, _param(w, 1, count, x.dtype), mean,
               rstd, g, np.empty(0, x.dtype) if dx is None else dx, dx is not None, pw.reshape(-1), pb.reshape(-1), rows,
               n, span, cycle, bool(rms), t(0), t(1 / n), blocks)
    for out, part in ((dw, pw), (db, pb)):
        if out is not None:
            out[:count] = part.sum(0)
