"""The gates of one time step of a recurrent layer, forward and backward, over packed rows of a batch.

One pass over each row: the gate pre-activations gx + gh + bh, their sigmoid/tanh, the new cell and
hidden state, and what the backward needs (the activations), all for one hidden unit at a time. The
mode is chosen once per call, so each inner loop runs straight code. Mode codes: ``MODES`` below.
"""
import math

from numba import njit, prange

RNN_TANH, RNN_RELU, LSTM, GRU = 0, 1, 2, 3
MODES = {"RNN_TANH": RNN_TANH, "RNN_RELU": RNN_RELU, "LSTM": LSTM, "GRU": GRU}


@njit(inline="always")
def gates(mode):
    """Gate pre-activations per hidden unit."""
    return 4 if mode == LSTM else 3 if mode == GRU else 1


@njit(inline="always")
def _sigmoid(v):
    return 1.0 / (1.0 + math.exp(-v))


@njit(inline="always")
def _lstm_row(gx, gh, bh, has_bias, cx, hy, cy, saved, H):
    for j in range(H):
        p_i, p_f = gx[j] + gh[j], gx[H + j] + gh[H + j]
        p_g, p_o = gx[2 * H + j] + gh[2 * H + j], gx[3 * H + j] + gh[3 * H + j]
        if has_bias:
            p_i, p_f, p_g, p_o = p_i + bh[j], p_f + bh[H + j], p_g + bh[2 * H + j], p_o + bh[3 * H + j]
        i, f, g, o = _sigmoid(p_i), _sigmoid(p_f), math.tanh(p_g), _sigmoid(p_o)
        c = f * cx[j] + i * g
        cy[j] = c
        hy[j] = o * math.tanh(c)
        saved[j], saved[H + j], saved[2 * H + j], saved[3 * H + j] = i, f, g, o


@njit(inline="always")
def _gru_row(gx, gh, bh, has_bias, hx, hy, saved, H):
    for j in range(H):
        p_r, p_z, hn = gx[j] + gh[j], gx[H + j] + gh[H + j], gh[2 * H + j]
        if has_bias:
            p_r, p_z, hn = p_r + bh[j], p_z + bh[H + j], hn + bh[2 * H + j]
        r, z = _sigmoid(p_r), _sigmoid(p_z)
        n = math.tanh(gx[2 * H + j] + r * hn)
        hy[j] = n + z * (hx[j] - n)
        saved[j], saved[H + j], saved[2 * H + j], saved[3 * H + j] = r, z, n, hn


@njit(inline="always")
def _plain_row(mode, gx, gh, bh, has_bias, hy, H):
    for j in range(H):
        p = gx[j] + gh[j]
        if has_bias:
            p += bh[j]
        hy[j] = math.tanh(p) if mode == RNN_TANH else (p if p > 0.0 or p != p else 0.0)   # (relu keeps NaN)


@njit(inline="always")
def _cell_rows(mode, gx, gh, bh, has_bias, hx, cx, hy, cy, saved, H, r0, r1):
    G = gates(mode)
    for b in range(r0, r1):
        x, h = gx[b * G * H:(b + 1) * G * H], gh[b * G * H:(b + 1) * G * H]
        out = hy[b * H:(b + 1) * H]
        if mode == LSTM:
            _lstm_row(x, h, bh, has_bias, cx[b * H:(b + 1) * H], out, cy[b * H:(b + 1) * H],
                      saved[b * 4 * H:(b + 1) * 4 * H], H)
        elif mode == GRU:
            _gru_row(x, h, bh, has_bias, hx[b * H:(b + 1) * H], out, saved[b * 4 * H:(b + 1) * 4 * H], H)
        else:
            _plain_row(mode, x, h, bh, has_bias, out, H)


@njit(inline="always")
def _lstm_backward_row(dh, dy, has_dy, dc, has_dc, cx, cy, saved, dgx, dcx, H):
    for j in range(H):
        i, f, g, o = saved[j], saved[H + j], saved[2 * H + j], saved[3 * H + j]
        d = dh[j] + (dy[j] if has_dy else 0.0)
        tc = math.tanh(cy[j])
        dct = (dc[j] if has_dc else 0.0) + d * o * (1.0 - tc * tc)
        dgx[j] = dct * g * i * (1.0 - i)
        dgx[H + j] = dct * cx[j] * f * (1.0 - f)
        dgx[2 * H + j] = dct * i * (1.0 - g * g)
        dgx[3 * H + j] = d * tc * o * (1.0 - o)
        dcx[j] = dct * f


@njit(inline="always")
def _gru_backward_row(dh, dy, has_dy, hx, saved, dgx, dgh, dhx, H):
    for j in range(H):
        r, z, n, hn = saved[j], saved[H + j], saved[2 * H + j], saved[3 * H + j]
        d = dh[j] + (dy[j] if has_dy else 0.0)
        dn = d * (1.0 - z) * (1.0 - n * n)
        dr = dn * hn * r * (1.0 - r)
        dz = d * (hx[j] - n) * z * (1.0 - z)
        dgx[j] = dgh[j] = dr
        dgx[H + j] = dgh[H + j] = dz
        dgx[2 * H + j] = dn
        dgh[2 * H + j] = dn * r
        dhx[j] = d * z


@njit(inline="always")
def _plain_backward_row(mode, dh, dy, has_dy, hy, dgx, H):
    for j in range(H):
        d = dh[j] + (dy[j] if has_dy else 0.0)
        y = hy[j]
        dgx[j] = d * (1.0 - y * y) if mode == RNN_TANH else (d if y > 0.0 else 0.0)


@njit(inline="always")
def _cell_backward_rows(mode, dh, dy, has_dy, dc, has_dc, hx, cx, hy, cy, saved, dgx, dgh, dhx, dcx, H, r0, r1):
    G = gates(mode)
    for b in range(r0, r1):
        u, v, w = b * H, (b + 1) * H, b * G * H   # this row's units and its first gate (absent buffers: empty)
        if mode == LSTM:
            _lstm_backward_row(dh[u:v], dy[u:v], has_dy, dc[u:v], has_dc,
                               cx[u:v], cy[u:v], saved[4 * u:4 * v], dgx[w:w + G * H], dcx[u:v], H)
        elif mode == GRU:
            _gru_backward_row(dh[u:v], dy[u:v], has_dy, hx[u:v], saved[4 * u:4 * v],
                              dgx[w:w + G * H], dgh[w:w + G * H], dhx[u:v], H)
        else:
            _plain_backward_row(mode, dh[u:v], dy[u:v], has_dy, hy[u:v], dgx[w:w + G * H], H)


@njit(cache=True, nogil=True)
def rnn_cell_serial(mode, gx, gh, bh, has_bias, hx, cx, hy, cy, saved, H, rows, blocks):
    _cell_rows(mode, gx, gh, bh, has_bias, hx, cx, hy, cy, saved, H, 0, rows)


@njit(cache=True, nogil=True, parallel=True)
def rnn_cell_parallel(mode, gx, gh, bh, has_bias, hx, cx, hy, cy, saved, H, rows, blocks):
    for k in prange(blocks):
        _cell_rows(mode, gx, gh, bh, has_bias, hx, cx, hy, cy, saved, H, rows * k // blocks, rows * (k + 1) // blocks)


@njit(cache=True, nogil=True)
def rnn_cell_backward_serial(mode, dh, dy, has_dy, dc, has_dc, hx, cx, hy, cy, saved, dgx, dgh, dhx, dcx, H, rows,
                             blocks):
    _cell_backward_rows(mode, dh, dy, has_dy, dc, has_dc, hx, cx, hy, cy, saved, dgx, dgh, dhx, dcx, H, 0, rows)


@njit(cache=True, nogil=True, parallel=True)
def rnn_cell_backward_parallel(mode, dh, dy, has_dy, dc, has_dc, hx, cx, hy, cy, saved, dgx, dgh, dhx, dcx, H, rows,
                               blocks):
    for k in prange(blocks):
        _cell_backward_rows(mode, dh, dy, has_dy, dc, has_dc, hx, cx, hy, cy, saved, dgx, dgh, dhx, dcx, H,
                            rows * k // blocks, rows * (k + 1) // blocks)
