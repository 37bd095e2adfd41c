"""Argument checks of the primitives that every device's kernels share (before any kernel runs:
Numba does not check bounds, and a CUDA kernel reading past a buffer corrupts memory silently)."""
import numpy as np

from . import OP_CODES, RANDOM_KINDS

_RANDOM_CODES = OP_CODES["random"]
FLOATS = (np.dtype(np.float32), np.dtype(np.float64))   # the float dtypes of the fused primitives' buffers
_RANDOM_OUT_DTYPES = {"uniform": ("float32", "float64"), "normal": ("float32", "float64"), "integers": ("int64",)}


def conv_geometry(geom, image, cols, name):
    if len(geom) != 13:
        raise ValueError(f"{name}: expected 13 geometry values, got {len(geom)}")
    planes, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow = (int(v) for v in geom)
    if min(planes, h, w, oh, ow, ph, pw) < 0 or min(kh, kw, sh, sw, dh, dw) < 1:
        raise ValueError(f"{name}: invalid geometry {geom}")
    if image.size < planes * h * w:
        raise ValueError(f"{name}: image buffer has {image.size} elements, needs {planes * h * w}")
    if cols is not None and cols.size < planes * kh * kw * oh * ow:
        raise ValueError(f"{name}: column buffer has {cols.size} elements, needs {planes * kh * kw * oh * ow}")
    return planes, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow


def conv_channels(channels, planes, name):
    """The C of the (C*kh*kw, planes/C, oh*ow) column layout; 0 means planes (unfold's layout)."""
    c = int(channels) or planes
    if planes and (c < 1 or planes % c):
        raise ValueError(f"{name}: channels={channels} does not divide the {planes} planes")
    return c or 1


def conv_columns(name, image, cols, geom, channels):
    """im2col/col2im: the checked geometry and channel count; image and columns share a dtype."""
    g = conv_geometry(geom, image, cols, name)
    c = conv_channels(channels, g[0], name)
    if cols.dtype != image.dtype:
        raise TypeError(f"{name}: dtypes differ")
    return g, c


def pool_buffers(name, values, like, index, n, what="output"):
    """max_pool2d's per-output buffers: ``values`` (of ``like``'s dtype) and an int64 ``index``,
    n elements each."""
    if values.size < n or index.size < n or values.dtype != like.dtype or index.dtype != np.int64:
        raise ValueError(f"{name}: {what} or index buffer too small or of the wrong dtype")


def softmax_rows(name, n, *bufs) -> int:
    """The number of rows, after checking that the buffers hold the same whole rows of n."""
    if n < 1:
        raise ValueError(f"{name}: rows must have at least one element, got n={n}")
    size = bufs[0].size
    if size % n or any(b.size < size or b.dtype != bufs[0].dtype for b in bufs[1:]):
        raise ValueError(f"{name}: buffers of {[b.size for b in bufs]} elements and dtypes "
                         f"{[b.dtype.name for b in bufs]} do not hold the same whole rows of {n}")
    return size // n


def random_arguments(kind, out, a, b) -> int:
    """The ``random`` primitive's checks; returns the kind's code (OP_CODES["random"])."""
    if kind not in _RANDOM_CODES:
        raise ValueError(f"random: unknown kind {kind!r}; expected one of {RANDOM_KINDS}")
    if out.dtype.name not in _RANDOM_OUT_DTYPES[kind]:
        raise TypeError(f"random: kind {kind!r} fills {' or '.join(_RANDOM_OUT_DTYPES[kind])} buffers, "
                        f"not {out.dtype.name}")
    if kind == "integers" and not a < b:
        raise ValueError(f"random: integers need low < high, got [{a}, {b})")
    return _RANDOM_CODES[kind]


def random_span(kind, a, b) -> np.uint64:
    """b - a as the kernels' unsigned 64-bit range (0 for the whole range, and for float kinds)."""
    return np.uint64((int(b) - int(a)) % (1 << 64) if kind == "integers" else 0)


def philox_state(name, seed):
    """The device state buffer a draw reads its (seed, offset) from, or None where ``seed`` is a number."""
    if isinstance(seed, (int, np.integer)):
        return None
    if getattr(seed, "dtype", None) != np.int64 or seed.size != 2:
        raise TypeError(f"{name}: seed must be an integer, or a Philox state buffer of two int64 elements "
                        f"(seed, offset), got {type(seed).__name__}")
    return seed


def random_stream(seed, offset, name="random"):
    """The Philox key and counter start as the kernels take them (unsigned 64-bit). A state buffer is
    read here: the CPU kernels' memory is the host's, so this is the launch reading it."""
    state = philox_state(name, seed)
    if state is not None:
        seed, offset = int(state[0]), int(state[1]) + offset
    return np.uint64(seed % (1 << 64)), np.uint64(offset % (1 << 64))


def device_stream(seed, offset, null, name="random"):
    """(key, counter start, state) as a CUDA kernel takes them: a state buffer is passed for the kernel to read
    on the device (key 0, counter start the delta), else ``null`` with the numbers."""
    state = philox_state(name, seed)
    if state is None:
        return (*random_stream(seed, offset), null)
    return np.uint64(0), np.uint64(offset % (1 << 64)), state


def dropout_arguments(x, out, mask, p):
    """The ``dropout`` primitive's checks; returns 1 - p and 1 / (1 - p) as scalars of x's dtype."""
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout: probability must be in [0, 1), got {p}")
    if x.dtype not in FLOATS or out.dtype != x.dtype or mask.dtype != x.dtype:
        raise TypeError(f"dropout: x, out and mask must be float32 or float64 buffers of one dtype, got "
                        f"{x.dtype.name}, {out.dtype.name}, {mask.dtype.name}")
    if not x.size == out.size == mask.size:
        raise ValueError(f"dropout: x, out and mask differ in size ({x.size}, {out.size}, {mask.size})")
    return x.dtype.type(1.0 - p), x.dtype.type(1.0 / (1.0 - p))


def _fits(name, what, buf, layout):
    """A layout's elements lie inside ``buf``."""
    lo, hi = layout.span()
    if layout.numel and (lo < 0 or hi >= buf.size):
        raise ValueError(f"{name}: {what}'s layout reaches elements [{lo}, {hi}] of a buffer of {buf.size}")


def attention_dropout(name, p):
    """The attention pair's dropout probability, checked: 0 (none) up to, not including, 1."""
    if not 0.0 <= p < 1.0:
        raise ValueError(f"{name}: dropout_p must be in [0, 1), got {p}")
    return float(p)


def attention_geometry(name, q, ql, k, kl, v, vl, mask, ml, packed):
    """(B, H, G, L, S, E, Ev) of the attention pair, after checking every operand: q (B, H, L, E), k (B, Hkv, S, E)
    and v (B, Hkv, S, Ev) with unit stride along their last dim, Hkv dividing H (G = H // Hkv), a mask (if any)
    over (B, H, L, S), one floating dtype, and the packed buffers as ``(what, buffer, elements)``."""
    if ql.ndim != 4 or kl.ndim != 4 or vl.ndim != 4:
        raise ValueError(f"{name}: expected 4-D query, key and value layouts, got shapes {list(ql.shape)}, "
                         f"{list(kl.shape)}, {list(vl.shape)}")
    (B, H, L, E), (Bk, Hkv, S, Ek), (Bv, Hv, Sv, Ev) = ql.shape, kl.shape, vl.shape
    if (Bk, Ek) != (B, E) or (Bv, Hv, Sv) != (B, Hkv, S) or min(B, H, L, S, E, Ev, Hkv) < 1 or H % Hkv:
        raise ValueError(f"{name}: expected query (B, H, L, E), key (B, Hkv, S, E) and value (B, Hkv, S, Ev) with "
                         f"Hkv dividing H, got {list(ql.shape)}, {list(kl.shape)}, {list(vl.shape)}")
    if q.dtype not in FLOATS:
        raise TypeError(f"{name}: float32 or float64 buffers only, got {q.dtype.name}")
    for what, b, lay in (("query", q, ql), ("key", k, kl), ("value", v, vl), ("mask", mask, ml)):
        if lay is None:
            continue
        if b.dtype != q.dtype:
            raise TypeError(f"{name}: {what} is {b.dtype.name}, query {q.dtype.name}")
        if what != "mask" and lay.strides[-1] != 1 and lay.shape[-1] > 1:
            raise ValueError(f"{name}: {what} needs unit stride along its last dim, got strides {lay.strides}")
        _fits(name, what, b, lay)
    if ml is not None and tuple(ml.shape) != (B, H, L, S):
        raise ValueError(f"{name}: mask of shape {list(ml.shape)}, expected {[B, H, L, S]}")
    for what, b, n in packed:
        if b.size < n or b.dtype != q.dtype:
            raise ValueError(f"{name}: {what} buffer of {b.size} {b.dtype.name} elements, needs {n} {q.dtype.name}")
    return B, H, H // Hkv, L, S, E, Ev


def norm_rows_geometry(name, n, span, cycle, x, params, **rows_of) -> int:
    """The norm_rows pair's checks: the number of rows of n in x, after checking that span divides n, that
    every per-row buffer in ``rows_of`` (name -> (buffer, elements per row)) matches x's dtype and rows, and
    that the affine ``params`` (None or a buffer) hold cycle * n / span elements."""
    n, span, cycle = int(n), int(span), int(cycle)
    if n < 1 or span < 1 or cycle < 1 or n % span:
        raise ValueError(f"{name}: invalid row geometry n={n}, span={span}, cycle={cycle}")
    if x.size % n:
        raise ValueError(f"{name}: a buffer of {x.size} elements does not hold whole rows of {n}")
    rows = x.size // n
    for what, (b, per_row) in rows_of.items():
        if b is None:
            continue
        if b.dtype != x.dtype or b.size < rows * per_row:
            raise ValueError(f"{name}: {what} buffer of {b.size} {b.dtype.name} elements, needs {rows * per_row} "
                             f"{x.dtype.name}")
    for p in params:
        if p is not None and (p.dtype != x.dtype or p.size < cycle * (n // span)):
            raise ValueError(f"{name}: parameter buffer of {p.size} {p.dtype.name} elements, needs "
                             f"{cycle * (n // span)} {x.dtype.name}")
    return rows


def batch_norm_buffers(name, shape, training, packed, channel):
    """(N, C, S) of the batch norm pair, after checking it and the buffers: ``packed`` the (N, C, S) ones as
    ``(what, buffer)`` (the first sets the dtype, float32 or float64), ``channel`` the C-element ones, None
    where absent. Eval mode needs the running statistics."""
    N, C, S = (int(v) for v in shape)
    if min(N, C, S) < 0:
        raise ValueError(f"{name}: invalid shape (N, C, S) = {(N, C, S)}")
    dtype = packed[0][1].dtype
    if dtype not in FLOATS:
        raise TypeError(f"{name}: float32 or float64 buffers only, got {dtype.name}")
    if not training and any(b is None for what, b in channel if what.startswith("running")):
        raise ValueError(f"{name}: eval mode needs running_mean and running_var")
    for what, b, n in [(w, b, N * C * S) for w, b in packed] + [(w, b, C) for w, b in channel]:
        if b is not None and (b.size < n or b.dtype != dtype):
            raise ValueError(f"{name}: {what} buffer of {b.size} {b.dtype.name} elements, needs {n} {dtype.name}")
    return N, C, S


RNN_MODES = ("RNN_TANH", "RNN_RELU", "LSTM", "GRU")   # the rnn_cell pair's modes, in the order of their codes
RNN_GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}


def rnn_cell_buffers(name, mode, hidden, gates, buffers):
    """(mode code, batch rows B) of an rnn_cell(_backward) call, after checking the mode, ``hidden``, and that
    every buffer the mode uses is given, of ``gates``' float dtype, with room for its rows. ``gates`` is a
    (B, G * hidden) buffer; ``buffers``: ``(what, buffer, units per row or 0 for the bias, used)``."""
    if mode not in RNN_GATES:
        raise ValueError(f"{name}: unknown mode {mode!r}, expected one of {', '.join(RNN_MODES)}")
    G = RNN_GATES[mode]
    if not isinstance(hidden, (int, np.integer)) or hidden < 1 or gates.size % (G * hidden):
        raise ValueError(f"{name}: hidden={hidden!r} must be a positive integer whose {G} gates make whole rows "
                         f"of a gate buffer of {gates.size} elements")
    if gates.dtype not in FLOATS:
        raise TypeError(f"{name}: float32 or float64 buffers only, got {gates.dtype.name}")
    rows = gates.size // (G * hidden)
    for what, b, units, used in buffers:
        if not used:
            continue
        n = G * hidden if units == 0 else rows * units * hidden
        if b is None or b.size < n or b.dtype != gates.dtype:
            got = "None" if b is None else f"a buffer of {b.size} {b.dtype.name} elements"
            raise ValueError(f"{name}: mode {mode} needs {what} of {n} {gates.dtype.name} elements, got {got}")
    return RNN_MODES.index(mode), rows


def rnn_cell_arguments(mode, gx, gh, bh, hx, cx, hy, cy, saved, hidden):
    """(mode code, rows) of an rnn_cell call, checked (``rnn_cell_buffers``)."""
    lstm, gru = mode == "LSTM", mode == "GRU"
    return rnn_cell_buffers("rnn_cell", mode, hidden, gx, (
        ("gh", gh, RNN_GATES.get(mode), True), ("bh", bh, 0, bh is not None), ("hx", hx, 1, gru),
        ("cx", cx, 1, lstm), ("hy", hy, 1, True), ("cy", cy, 1, lstm), ("saved", saved, 4, lstm or gru)))


def rnn_cell_backward_arguments(mode, dh, dy, dc, hx, cx, hy, cy, saved, dgx, dgh, dhx, dcx, hidden):
    """(mode code, rows) of an rnn_cell_backward call, checked (``rnn_cell_buffers``)."""
    lstm, gru = mode == "LSTM", mode == "GRU"
    return rnn_cell_buffers("rnn_cell_backward", mode, hidden, dgx, (
        ("dh", dh, 1, True), ("dy", dy, 1, dy is not None), ("dc", dc, 1, lstm and dc is not None),
        ("hx", hx, 1, gru), ("cx", cx, 1, lstm), ("hy", hy, 1, not (lstm or gru)), ("cy", cy, 1, lstm),
        ("saved", saved, 4, lstm or gru), ("dgh", dgh, RNN_GATES.get(mode), gru), ("dhx", dhx, 1, gru),
        ("dcx", dcx, 1, lstm)))


def cross_entropy_rows(name, n, x, target, weight, stats, *row_bufs) -> int:
    """The number of packed rows of n classes in x, after checking that target (int64) and every per-row
    buffer hold one element per row, stats (when given) two, and weight (when given) n of x's dtype."""
    if n < 1:
        raise ValueError(f"{name}: rows must have at least one class, got n={n}")
    rows = x.size // n
    if x.size % n or target.dtype != np.int64 or target.size < rows:
        raise ValueError(f"{name}: {x.size} inputs do not make whole rows of {n} with an int64 target each "
                         f"(got {target.size} {target.dtype.name} targets)")
    if weight is not None and (weight.size < n or weight.dtype != x.dtype):
        raise ValueError(f"{name}: weight needs {n} elements of {x.dtype.name}, got {weight.size} of "
                         f"{weight.dtype.name}")
    if stats is not None and (stats.dtype != x.dtype or stats.size < 2 * rows):
        raise ValueError(f"{name}: stats needs {2 * rows} elements of {x.dtype.name}, got {stats.size} of "
                         f"{stats.dtype.name}")
    if any(b.dtype != x.dtype or b.size < rows for b in row_bufs):
        raise ValueError(f"{name}: per-row buffers need {rows} elements of {x.dtype.name}, got "
                         f"{[(b.size, b.dtype.name) for b in row_bufs]}")
    return rows
