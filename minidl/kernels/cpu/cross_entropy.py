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


def _common(name, x, n, target, weight, stats, smoothing, logits, *row_bufs):
    """(rows, parallel blocks, weight and stats as buffers (size 0: none), smoothing in x's dtype)."""
    rows = cross_entropy_rows(name, n, x, target, weight, stats if logits else None, *row_bufs)
    none = np.empty(0, x.dtype)
    return (rows, max(1, min(rows, x.size // _BLOCK)), none if weight is None else weight,
            stats if logits else none, x.dtype.type(smoothing))


def _op_name(logits):
    return "cross_entropy" if logits else "nll_loss"


@kernels.register("cross_entropy")
def cross_entropy(x, target, weight, out, wrow, stats, n, ignore_index, smoothing, logits):
    n, logits = int(n), bool(logits)
    rows, blocks, weight, stats, eps = _common(_op_name(logits), x, n, target, weight, stats, smoothing, logits,
                                               out, wrow)
    if not rows:
        return
    bad = np.zeros(2, np.int64)
    launch(cross_entropy_serial, cross_entropy_parallel, x.size, x, target, weight, out, wrow, stats, rows, n,
           int(ignore_index), eps, logits, bad, blocks)
    if bad[0]:
        raise IndexError(f"{_op_name(logits)}: Target {bad[1]} is out of bounds (the input has {n} classes).")


@kernels.register("cross_entropy_backward")
def cross_entropy_backward(x, target, weight, stats, g, out, n, ignore_index, smoothing, logits):
    n, logits = int(n), bool(logits)
    name = _op_name(logits) + " backward"
    rows, blocks, weight, stats, eps = _common(name, x, n, target, weight, stats, smoothing, logits)
    if g.dtype != x.dtype or g.size not in (1, rows) or out.dtype != x.dtype or out.size < x.size:
        raise ValueError(f"{name}: the gradient needs 1 or {rows} elements and out {x.size}, of {x.dtype.name}")
    if rows:
        launch(cross_entropy_backward_serial, cross_entropy_backward_parallel, x.size, x, target, weight, stats, g,
               out, rows, n, int(ignore_index), eps, logits, blocks)
