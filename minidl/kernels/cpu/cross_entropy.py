"""Cross-entropy and the negative log-likelihood over packed rows on the CPU (kernels in
``jit/cross_entropy.py``): one pass over the logits each way, where the composition took a log-softmax,
a gather, a weight lookup and their backwards."""
import numpy as np

from ... import kernels
from ..checks import cross_entropy_rows
from .jit.cross_entropy import (cross_entropy_backward_parallel, cross_entropy_backward_serial,
                                cross_entropy_parallel, cross_entropy_serial)
from .strided import launch

_BLOCK = 1 << 14          # logits per parallel work block (whole rows)


def _common(name, x, n, target, weight, eps, *row_bufs):
    """(rows, parallel blocks, weight as a buffer (size 0: none), eps in x's dtype)."""
    rows = cross_entropy_rows(name, n, x, target, weight, *row_bufs)
    weight = np.empty(0, x.dtype) if weight is None else weight
    return rows, max(1, min(rows, x.size // _BLOCK)), weight, x.dtype.type(eps)


def _op_name(logits):
    return "cross_entropy" if logits else "nll_loss"


@kernels.register("cross_entropy")
def cross_entropy(x, target, weight, out, wrow, lse, n, ignore_index, smoothing, logits):
    n, logits = int(n), bool(logits)
    rows, blocks, weight, eps = _common(_op_name(logits), x, n, target, weight, smoothing, out, wrow,
                                        *((lse,) if logits else ()))
    if not rows:
        return
    lse = lse if logits else np.empty(0, x.dtype)
    bad = np.zeros(2, np.int64)
    launch(cross_entropy_serial, cross_entropy_parallel, x.size, x, target, weight, out, wrow, lse, rows, n,
           int(ignore_index), eps, logits, bad, blocks)
    if bad[0]:
        raise IndexError(f"{_op_name(logits)}: Target {bad[1]} is out of bounds (the input has {n} classes).")


@kernels.register("cross_entropy_backward")
def cross_entropy_backward(x, target, weight, lse, g, out, n, ignore_index, smoothing, logits):
    n, logits = int(n), bool(logits)
    name = _op_name(logits) + " backward"
    rows, blocks, weight, eps = _common(name, x, n, target, weight, smoothing, *((lse,) if logits else ()))
    if g.dtype != x.dtype or g.size not in (1, rows) or out.dtype != x.dtype or out.size < x.size:
        raise ValueError(f"{name}: the gradient needs 1 or {rows} elements and out {x.size}, of {x.dtype.name}")
    if rows:
        launch(cross_entropy_backward_serial, cross_entropy_backward_parallel, x.size, x, target, weight,
               lse if logits else np.empty(0, x.dtype), g, out, rows, n, int(ignore_index), eps, logits, blocks)
