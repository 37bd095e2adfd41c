"""Layer, RMS and group norm over packed rows on the GPU (csrc/norm_rows.cu): a warp per short row or a block
per long one, forward and dx; the parameter gradients as sums over rows, 32 columns or one channel a block.
The same checks and results as the CPU kernels."""
from .... import kernels
from ...checks import norm_rows_geometry
from .. import runtime
from .common import FLOATS, kernel, require_dtype
from .softmax import WARP_ROW_MAX

FILE = "norm_rows"
PARAMS_THREADS = 256      # NORM_PARAMS_THREADS of csrc/norm_rows.cu


def _rows_launch(name, dtype, n, rows, *args):
    lanes = 32 if n <= WARP_ROW_MAX else runtime.BLOCK
    runtime.launch_rows(kernel(FILE, name, dtype), -(-rows // (runtime.BLOCK // lanes)), *args, runtime.i32(lanes))


def _null(b):
    return runtime.NULL if b is None else b


@kernels.register("norm_rows", "cuda")
def norm_rows(x, w, b, out, mean, rstd, n, span, cycle, eps, rms):
    rows = norm_rows_geometry("norm_rows", n, span, cycle, x, (w, b), output=(out, n), mean=(mean, 1),
                              rstd=(rstd, 1))
    require_dtype(x.dtype, FLOATS, "norm_rows")
    if rows:
        _rows_launch("norm_rows", x.dtype, int(n), rows, x, _null(w), _null(b), out, mean, rstd, runtime.i64(rows),
                     runtime.i64(n), runtime.i64(span), runtime.i64(cycle), x.dtype.type(eps), runtime.i32(bool(rms)))


@kernels.register("norm_rows_backward", "cuda")
def norm_rows_backward(x, w, mean, rstd, g, dx, dw, db, n, span, cycle, rms):
    rows = norm_rows_geometry("norm_rows_backward", n, span, cycle, x, (w, dw, db), mean=(mean, 1),
                              rstd=(rstd, 1), gradient=(g, n), dx=(dx, n))
    require_dtype(x.dtype, FLOATS, "norm_rows_backward")
    geometry = (runtime.i64(rows), runtime.i64(n), runtime.i64(span), runtime.i64(cycle))
    if rows and dx is not None:
        _rows_launch("norm_rows_dx", x.dtype, int(n), rows, x, _null(w), mean, rstd, g, dx, *geometry,
                     runtime.i32(bool(rms)))
    if dw is not None or db is not None:
        together = 32 if int(span) == 1 else 1   # (see csrc/norm_rows.cu)
        runtime.launch_rows(kernel(FILE, "norm_rows_params", x.dtype),
                            -(-int(cycle) * (int(n) // int(span)) // together), x, mean, rstd, g, _null(dw), _null(db),
                            *geometry, runtime.i32(together), block=PARAMS_THREADS)
