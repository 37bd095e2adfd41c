"""The gates of a recurrent layer's time step on the CPU (kernels in ``jit/rnn.py``): one pass over the batch's
rows instead of a dozen elementwise ops per step, forward and backward."""
import numpy as np

from ... import kernels
from ..checks import rnn_cell_arguments, rnn_cell_backward_arguments
from .jit.rnn import rnn_cell_backward_parallel, rnn_cell_backward_serial, rnn_cell_parallel, rnn_cell_serial
from .strided import launch

_BLOCK = 1 << 14          # gate elements per parallel work block (whole rows)


def _blocks(rows, gates):
    return max(1, min(rows, gates.size // _BLOCK))


@kernels.register("rnn_cell")
def rnn_cell(mode, gx, gh, bh, hx, cx, hy, cy, saved, hidden):
    code, rows = rnn_cell_arguments(mode, gx, gh, bh, hx, cx, hy, cy, saved, hidden)
    none = gx[:0]     # (an absent buffer: an empty one of the same type, so one compilation per dtype)
    launch(rnn_cell_serial, rnn_cell_parallel, gx.size, code, gx, gh, none if bh is None else bh, bh is not None,
           none if hx is None else hx, none if cx is None else cx, hy, none if cy is None else cy,
           none if saved is None else saved, np.empty_like(gx), np.empty_like(gx), int(hidden), gx.dtype.type(1), rows,
           _blocks(rows, gx))


@kernels.register("rnn_cell_backward")
def rnn_cell_backward(mode, dh, dy, dc, hx, cx, hy, cy, saved, dgx, dgh, dhx, dcx, hidden):
    code, rows = rnn_cell_backward_arguments(mode, dh, dy, dc, hx, cx, hy, cy, saved, dgx, dgh, dhx, dcx, hidden)
    none = dgx[:0]
    launch(rnn_cell_backward_serial, rnn_cell_backward_parallel, dgx.size, code, dh, none if dy is None else dy,
           dy is not None, none if dc is None else dc, dc is not None, *(none if b is None else b for b in (
               hx, cx, hy, cy, saved, dgx, dgh, dhx, dcx)), np.empty_like(dgx), int(hidden), dgx.dtype.type(1), rows,
           _blocks(rows, dgx))
