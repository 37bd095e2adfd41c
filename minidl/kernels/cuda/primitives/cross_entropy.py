"""Cross-entropy and the negative log-likelihood over packed rows on the GPU (csrc/cross_entropy.cu): a warp
per row, the same checks and results as the CPU kernels; a target out of range surfaces as IndexError at the
next synchronisation (runtime.raise_pending_errors)."""
from .... import kernels
from ...checks import cross_entropy_rows
from .. import runtime
from .common import FLOATS, kernel, require_dtype

FILE = "cross_entropy"
WARPS = runtime.BLOCK // 32   # rows per block


def _common(name, x, n, target, weight, stats, smoothing, logits, *row_bufs):
    """(rows, weight and stats as kernel arguments (NULL: none), smoothing in x's dtype)."""
    rows = cross_entropy_rows(name, n, x, target, weight, stats if logits else None, *row_bufs)
    require_dtype(x.dtype, FLOATS, name)
    return (rows, runtime.NULL if weight is None else weight, stats if logits else runtime.NULL,
            x.dtype.type(smoothing))


@kernels.register("cross_entropy", "cuda")
def cross_entropy(x, target, weight, out, wrow, stats, n, ignore_index, smoothing, logits):
    n, logits = int(n), bool(logits)
    rows, weight, stats, eps = _common("cross_entropy", x, n, target, weight, stats, smoothing, logits, out, wrow)
    runtime.launch_rows(kernel(FILE, "cross_entropy", x.dtype), -(-rows // WARPS), x, target, weight, out, wrow,
                        stats, runtime.i64(rows), runtime.i64(n), runtime.i64(ignore_index), eps,
                        runtime.i32(logits), runtime.error_buffer())


@kernels.register("cross_entropy_backward", "cuda")
def cross_entropy_backward(x, target, weight, stats, g, out, n, ignore_index, smoothing, logits):
    n, logits = int(n), bool(logits)
    rows, weight, stats, eps = _common("cross_entropy_backward", x, n, target, weight, stats, smoothing, logits)
    if g.dtype != x.dtype or g.size not in (1, rows) or out.dtype != x.dtype or out.size < x.size:
        raise ValueError(f"cross_entropy_backward: the gradient needs 1 or {rows} elements and out {x.size}, "
                         f"of {x.dtype.name}")
    runtime.launch_rows(kernel(FILE, "cross_entropy_backward", x.dtype), -(-rows // WARPS), x, target, weight,
                        stats, g, runtime.i64(g.size), out, runtime.i64(rows), runtime.i64(n),
                        runtime.i64(ignore_index), eps, runtime.i32(logits))
