"""Softmax and log-softmax over packed rows on the GPU (csrc/softmax.cu): a warp per short row, a
block per long one."""

from .... import kernels
from ...checks import softmax_rows
from .. import runtime
from .common import FLOATS, kernel, require_dtype

FILE = "softmax"
WARP_ROW_MAX = 1024  # rows up to this long get a warp each (8 rows per block), longer ones a block


def _rows(name, n, *bufs):
    """The number of rows (the shared checks, and a dtype with a kernel)."""
    rows = softmax_rows(name, n, *bufs)
    require_dtype(bufs[0].dtype, FLOATS, name)
    return rows


def _launch(name, n, rows, log, *bufs):
    lanes = 32 if n <= WARP_ROW_MAX else runtime.BLOCK
    runtime.launch_rows(kernel(FILE, name, bufs[0].dtype), -(-rows // (runtime.BLOCK // lanes)), *bufs,
                        runtime.i64(rows), runtime.i64(n), runtime.i32(bool(log)), runtime.i32(lanes))


@kernels.register("softmax", "cuda")
def softmax(x, out, n, log):
    n = int(n)
    rows = _rows("softmax", n, x, out)
    if rows:
        _launch("softmax", n, rows, log, x, out)


@kernels.register("softmax_backward", "cuda")
def softmax_backward(y, g, out, n, log):
    n = int(n)
    rows = _rows("softmax_backward", n, y, g, out)
    if rows:
        _launch("softmax_backward", n, rows, log, y, g, out)
