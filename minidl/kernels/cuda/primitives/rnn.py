"""The gates of a recurrent layer's time step on the GPU (csrc/rnn.cu): a thread per hidden unit of each row,
with the CPU kernels' checks and formulas."""
from .... import kernels
from ...checks import rnn_cell_arguments, rnn_cell_backward_arguments
from .. import runtime
from .common import FLOATS, kernel, require_dtype

FILE = "rnn"


def _pointer(b):
    return runtime.NULL if b is None else b


@kernels.register("rnn_cell", "cuda")
def rnn_cell(mode, gx, gh, bh, hx, cx, hy, cy, saved, hidden):
    code, rows = rnn_cell_arguments(mode, gx, gh, bh, hx, cx, hy, cy, saved, hidden)
    require_dtype(gx.dtype, FLOATS, "rnn_cell")
    runtime.launch(kernel(FILE, "rnn_cell", gx.dtype), rows * int(hidden), runtime.i32(code), gx, gh,
                   *(_pointer(b) for b in (bh, hx, cx)), hy, _pointer(cy), _pointer(saved), runtime.i64(rows),
                   runtime.i64(hidden))


@kernels.register("rnn_cell_backward", "cuda")
def rnn_cell_backward(mode, dh, dy, dc, hx, cx, hy, cy, saved, dgx, dgh, dhx, dcx, hidden):
    code, rows = rnn_cell_backward_arguments(mode, dh, dy, dc, hx, cx, hy, cy, saved, dgx, dgh, dhx, dcx, hidden)
    require_dtype(dgx.dtype, FLOATS, "rnn_cell_backward")
    runtime.launch(kernel(FILE, "rnn_cell_backward", dgx.dtype), rows * int(hidden), runtime.i32(code), dh,
                   *(_pointer(b) for b in (dy, dc, hx, cx, hy, cy, saved)), dgx,
                   *(_pointer(b) for b in (dgh, dhx, dcx)), runtime.i64(rows), runtime.i64(hidden))
