"""The gates of one time step of a recurrent layer, forward and backward, over packed rows of a batch.

Row by row, in runs over one gate's hidden units at a time, so that every loop is straight arithmetic that
LLVM vectorises: the pre-activations gx + gh + bh, then sigmoid and tanh through one exp pass each
(``exp_run``: vectorised in float32), tanh(v) as 2 / (1 + exp(-2v)) - 1. ``one`` is 1 in the buffers' dtype,
so float32 stays float32 throughout. ``tmp`` and ``pre`` are scratch rows (G * H elements per row of the
batch). Mode codes: ``checks.RNN_MODES``' order.
"""
from numba import njit, prange

from .vector_math import exp_run

RNN_TANH, RNN_RELU, LSTM, GRU = 0, 1, 2, 3


@njit(inline="always")
def _gates(mode):
    return 4 if mode == LSTM else 3 if mode == GRU else 1


@njit(inline="always")
def _sigmoid_run(x, out, tmp, one):
    """out = 1 / (1 + exp(-x)) (out may be x)."""
    for j in range(x.size):
        tmp[j] = -x[j]
    exp_run(tmp[:x.size], out)
    for j in range(x.size):
        out[j] = one / (one + out[j])


@njit(inline="always")
def _tanh_run(x, out, tmp, one):
    """out = tanh(x) = 2 / (1 + exp(-2x)) - 1 (out may be x): -1 and 1 at -inf and inf, NaN kept."""
    two = one + one
    for j in range(x.size):
        tmp[j] = -two * x[j]
    exp_run(tmp[:x.size], out)
    for j in range(x.size):
        out[j] = two / (one + out[j]) - one


@njit(inline="always")
def _pre(x, h, b, has_bias, out):
    """out = x + h (+ b): one gate's pre-activations."""
    for j in range(out.size):
        out[j] = x[j] + h[j]
    if has_bias:
        for j in range(out.size):
            out[j] += b[j]


@njit(inline="always")
def _cell_row(mode, gx, gh, bh, has_bias, hx, cx, hy, cy, saved, pre, tmp, H, one):
    """One row: gx, gh, pre, tmp hold its G * H gate elements; hx, cx, hy, cy its H; saved its 4 * H."""
    if mode == LSTM:
        _pre(gx, gh, bh, has_bias, pre)
        _sigmoid_run(pre[:2 * H], saved[:2 * H], tmp, one)              # i, f
        _tanh_run(pre[2 * H:3 * H], saved[2 * H:3 * H], tmp, one)       # g
        _sigmoid_run(pre[3 * H:], saved[3 * H:], tmp, one)              # o
        for j in range(H):
            cy[j] = saved[H + j] * cx[j] + saved[j] * saved[2 * H + j]
        _tanh_run(cy, hy, tmp, one)
        for j in range(H):
            hy[j] = saved[3 * H + j] * hy[j]
    elif mode == GRU:
        _pre(gx[:2 * H], gh[:2 * H], bh[:2 * H], has_bias, pre[:2 * H])
        _sigmoid_run(pre[:2 * H], saved[:2 * H], tmp, one)              # r, z
        hn = saved[3 * H:]
        for j in range(H):
            hn[j] = gh[2 * H + j]
        if has_bias:
            for j in range(H):
                hn[j] += bh[2 * H + j]
        n = saved[2 * H:3 * H]
        for j in range(H):
            n[j] = gx[2 * H + j] + saved[j] * hn[j]
        _tanh_run(n, n, tmp, one)
        for j in range(H):
            hy[j] = n[j] + saved[H + j] * (hx[j] - n[j])
    else:
        _pre(gx, gh, bh, has_bias, pre)
        if mode == RNN_TANH:
            _tanh_run(pre, hy, tmp, one)
        else:
            for j in range(H):
                p = pre[j]
                hy[j] = p if p > 0 or p != p else one - one   # (relu keeps NaN)


@njit(inline="always")
def _cell_rows(mode, gx, gh, bh, has_bias, hx, cx, hy, cy, saved, pre, tmp, H, one, r0, r1):
    GH = _gates(mode) * H
    for b in range(r0, r1):
        u, v, w = b * H, (b + 1) * H, b * GH   # this row's units and gates (absent buffers: empty slices)
        _cell_row(mode, gx[w:w + GH], gh[w:w + GH], bh, has_bias, hx[u:v], cx[u:v], hy[u:v], cy[u:v],
                  saved[4 * u:4 * v], pre[w:w + GH], tmp[w:w + GH], H, one)


@njit(inline="always")
def _backward_row(mode, d, dc, has_dc, hx, cx, hy, cy, saved, dgx, dgh, dhx, dcx, tmp, H, one):
    """One row; d holds the gradient of hy (dh + dy)."""
    if mode == LSTM:
        tc = tmp[:H]
        _tanh_run(cy, tc, tmp[H:], one)
        for j in range(H):
            i, f, g, o = saved[j], saved[H + j], saved[2 * H + j], saved[3 * H + j]
            dct = d[j] * o * (one - tc[j] * tc[j])
            if has_dc:
                dct += dc[j]
            dgx[j] = dct * g * i * (one - i)
            dgx[H + j] = dct * cx[j] * f * (one - f)
            dgx[2 * H + j] = dct * i * (one - g * g)
            dgx[3 * H + j] = d[j] * tc[j] * o * (one - o)
            dcx[j] = dct * f
    elif mode == GRU:
        for j in range(H):
            r, z, n, hn = saved[j], saved[H + j], saved[2 * H + j], saved[3 * H + j]
            dn = d[j] * (one - z) * (one - n * n)
            dr = dn * hn * r * (one - r)
            dz = d[j] * (hx[j] - n) * z * (one - z)
            dgx[j] = dr
            dgh[j] = dr
            dgx[H + j] = dz
            dgh[H + j] = dz
            dgx[2 * H + j] = dn
            dgh[2 * H + j] = dn * r
            dhx[j] = d[j] * z
    elif mode == RNN_TANH:
        for j in range(H):
            dgx[j] = d[j] * (one - hy[j] * hy[j])
    else:
        for j in range(H):
            dgx[j] = d[j] if hy[j] > 0 else one - one


@njit(inline="always")
def _backward_rows(mode, dh, dy, has_dy, dc, has_dc, hx, cx, hy, cy, saved, dgx, dgh, dhx, dcx, tmp, H, one, r0,
                   r1):
    GH = _gates(mode) * H
    for b in range(r0, r1):
        u, v, w = b * H, (b + 1) * H, b * GH
        d = tmp[w:w + H]                     # (the row's scratch: H for d, then room for LSTM's tanh(c))
        for j in range(H):
            d[j] = dh[u + j]
        if has_dy:
            for j in range(H):
                d[j] += dy[u + j]
        _backward_row(mode, d, dc[u:v], has_dc, hx[u:v], cx[u:v], hy[u:v], cy[u:v], saved[4 * u:4 * v],
                      dgx[w:w + GH], dgh[w:w + GH], dhx[u:v], dcx[u:v], tmp[w + H:w + GH], H, one)


@njit(cache=True, nogil=True)
def rnn_cell_serial(mode, gx, gh, bh, has_bias, hx, cx, hy, cy, saved, pre, tmp, H, one, rows, blocks):
    _cell_rows(mode, gx, gh, bh, has_bias, hx, cx, hy, cy, saved, pre, tmp, H, one, 0, rows)


@njit(cache=True, nogil=True, parallel=True)
def rnn_cell_parallel(mode, gx, gh, bh, has_bias, hx, cx, hy, cy, saved, pre, tmp, H, one, rows, blocks):
    for k in prange(blocks):
        _cell_rows(mode, gx, gh, bh, has_bias, hx, cx, hy, cy, saved, pre, tmp, H, one, rows * k // blocks,
                   rows * (k + 1) // blocks)


@njit(cache=True, nogil=True)
def rnn_cell_backward_serial(mode, dh, dy, has_dy, dc, has_dc, hx, cx, hy, cy, saved, dgx, dgh, dhx, dcx, tmp, H,
                             one, rows, blocks):
    _backward_rows(mode, dh, dy, has_dy, dc, has_dc, hx, cx, hy, cy, saved, dgx, dgh, dhx, dcx, tmp, H, one, 0,
                   rows)


@njit(cache=True, nogil=True, parallel=True)
def rnn_cell_backward_parallel(mode, dh, dy, has_dy, dc, has_dc, hx, cx, hy, cy, saved, dgx, dgh, dhx, dcx, tmp, H,
                               one, rows, blocks):
    for k in prange(blocks):
        _backward_rows(mode, dh, dy, has_dy, dc, has_dc, hx, cx, hy, cy, saved, dgx, dgh, dhx, dcx, tmp, H, one,
                       rows * k // blocks, rows * (k + 1) // blocks)
