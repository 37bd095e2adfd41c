"""The recurrent part of one layer and direction over a whole sequence as one autograd node (the ``rnn_cell``
primitives): per time step one hidden matmul and one fused gate kernel, forward and backward; the weight
gradients are one matmul over all steps. The input projections of every step (one matmul) come from the
caller, so they stay ordinary ops."""
from __future__ import annotations

from .. import _dtype as dt
from ..autograd import Function
from ..kernels.checks import RNN_GATES
from ..layout import Layout
from .core import buf, check_devices, grad_enabled, kernel, new_like_shape, packed_buffer
from .registry import op
from .shape_ops import cat


class Recurrence(Function):
    """hs, h_n (, c_n) of ``mode`` from the input gates gx (T, B, G*H), run from t = 0 up, or down when
    ``reverse``. Saves the outputs, the cells (LSTM) and the gate activations; its backward runs the steps in
    reverse, a fused gate kernel and a matmul each, and is not differentiable itself (as cuDNN's RNN)."""

    @staticmethod
    def forward(ctx, gx, h0, c0, w_hh, b_hh, mode, reverse):
        (T, B, GH), H = gx.shape, w_hh.shape[1]
        lstm, gru = mode == "LSTM", mode == "GRU"
        hs = new_like_shape((T, B, H), gx.dtype, gx)
        cs = new_like_shape((T, B, H), gx.dtype, gx) if lstm else None
        saved = new_like_shape((T, B, 4 * H), gx.dtype, gx) if lstm or gru else None
        gh = new_like_shape((B, GH), gx.dtype, gx)
        matmul, cell = kernel("matmul", gx), kernel("rnn_cell", gx)
        w_t, rows = w_hh.mT, Layout((B, H))
        gxb, bh = packed_buffer(gx), None if b_hh is None else packed_buffer(b_hh)
        h, c = packed_buffer(h0), packed_buffer(c0) if lstm else None
        for t in (range(T - 1, -1, -1) if reverse else range(T)):
            matmul(h, rows, buf(w_t), w_t._layout, buf(gh), gh._layout)
            hy, cy = _step(buf(hs), t, B * H), _step(buf(cs), t, B * H) if lstm else None
            cell(mode, _step(gxb, t, B * GH), buf(gh), bh, h, c, hy, cy,
                 None if saved is None else _step(buf(saved), t, 4 * B * H), H)
            h, c = hy, cy
        ctx.save_for_backward(h0, c0, w_hh, hs, cs, saved)
        ctx.set_materialize_grads(False)   # (an unused output's gradient stays None: no zeros of its size)
        ctx.meta = (mode, reverse, b_hh is not None)
        last = 0 if reverse else T - 1
        return (hs, hs[last].clone()) + ((cs[last].clone(),) if lstm else ())

    @staticmethod
    def backward(ctx, g_hs, g_hn, g_cn=None):
        if grad_enabled():
            raise RuntimeError("recurrent layers: the fused LSTM/GRU/RNN backward is not differentiable (double "
                               "backward is unsupported, as for PyTorch's cuDNN RNN)")
        h0, c0, w_hh, hs, cs, saved = ctx.saved_tensors
        mode, reverse, has_bias = ctx.meta
        (T, B, H), lstm, gru = hs.shape, mode == "LSTM", mode == "GRU"
        GH, n = RNN_GATES[mode] * H, B * H
        dgx = new_like_shape((T, B, GH), hs.dtype, hs)
        dgh = new_like_shape((T, B, GH), hs.dtype, hs) if gru else dgx
        dh_prev = new_like_shape((B, H), hs.dtype, hs).zero_()   # (zero: the gradient of h_n when none comes)
        dc_prev = new_like_shape((B, H), hs.dtype, hs) if lstm else None
        dhx = new_like_shape((B, H), hs.dtype, hs) if gru else None
        dh = buf(dh_prev) if g_hn is None else packed_buffer(g_hn)
        dc = None if g_cn is None else packed_buffer(g_cn)
        dy = None if g_hs is None else packed_buffer(g_hs)
        matmul, cell, add = kernel("matmul", hs), kernel("rnn_cell_backward", hs), kernel("binary", hs)
        h0b, c0b = packed_buffer(h0), packed_buffer(c0) if lstm else None
        rows, gate_rows = Layout((B, H)), Layout((B, GH))
        for t in (range(T) if reverse else range(T - 1, -1, -1)):
            kept = None if saved is None else _step(buf(saved), t, 4 * n)
            cell(mode, dh, None if dy is None else _step(dy, t, n), dc, _previous(buf(hs), h0b, t, T, n, reverse),
                 _previous(buf(cs), c0b, t, T, n, reverse) if lstm else None, _step(buf(hs), t, n),
                 _step(buf(cs), t, n) if lstm else None, kept, _step(buf(dgx), t, B * GH),
                 _step(buf(dgh), t, B * GH) if gru else None, None if dhx is None else buf(dhx),
                 None if dc_prev is None else buf(dc_prev), H)
            matmul(_step(buf(dgh), t, B * GH), gate_rows, buf(w_hh), w_hh._layout, buf(dh_prev), rows)
            if gru:
                add("add", buf(dh_prev), rows, buf(dhx), rows, buf(dh_prev), rows)
            dh, dc = buf(dh_prev), None if dc_prev is None else buf(dc_prev)
        needs = ctx.needs_input_grad
        dw = db = None
        if needs[3] or (has_bias and needs[4]):
            flat = dgh.reshape(T * B, GH)
            if needs[3]:
                first = h0.unsqueeze(0)   # the states each step's gates saw, in time order
                inputs = first if T == 1 else cat([hs[1:], first]) if reverse else cat([first, hs[:-1]])
                dw = flat.mT @ inputs.reshape(T * B, H)
            if has_bias and needs[4]:
                db = flat.sum(0)
        return dgx, dh_prev, dc_prev, dw, db, None, None


def _step(b, t, n):
    """Step t's n elements of a packed (T, ...) buffer."""
    return b[t * n:(t + 1) * n]


def _previous(b, start, t, T, n, reverse):
    """The state before step t: step t - 1 (t + 1 when ``reverse``) of the packed buffer b, or the start."""
    if t == (T - 1 if reverse else 0):
        return start
    return _step(b, t + 1 if reverse else t - 1, n)


def _samples(t):
    def run(mode, reverse, bias=True):
        def fn(gx, h0, *rest):
            c0 = rest[0] if mode == "LSTM" else None
            w_hh, b_hh = rest[-2:] if bias else (rest[-1], None)
            return list(recurrence(gx, h0, c0, w_hh, b_hh, mode, reverse))
        return fn

    def inputs(mode, T=3, B=2, H=2, bias=True):
        G = RNN_GATES[mode]
        return (t.rn(T, B, G * H), t.rn(B, H)) + ((t.rn(B, H),) if mode == "LSTM" else ()) + \
            (t.rn(G * H, H),) + ((t.rn(G * H),) if bias else ())

    return [t.S("recurrence-lstm", run("LSTM", False), *inputs("LSTM")),
            t.S("recurrence-lstm-reverse-no-bias", run("LSTM", True, False), *inputs("LSTM", bias=False)),
            t.S("recurrence-gru-reverse", run("GRU", True), *inputs("GRU", T=4)),
            t.S("recurrence-gru-one-step", run("GRU", False), *inputs("GRU", T=1)),
            t.S("recurrence-tanh", run("RNN_TANH", False), *inputs("RNN_TANH")),
            t.S("recurrence-relu", run("RNN_RELU", True), *inputs("RNN_RELU"))]


@op("_recurrence", method=False, namespace="nn.functional", samples=_samples)
def recurrence(gx, h0, c0, w_hh, b_hh, mode: str, reverse: bool = False):
    """The recurrent part of an RNN/LSTM/GRU layer (``mode`` as ``nn.RNNBase``'s) over a sequence: from the input
    gates gx = x W_ih^T + b_ih of every step, (T, B, G*H) in PyTorch's gate order, and the initial state h0 (B, H)
    (and c0 for LSTM, else None), each step adds h W_hh^T + b_hh and applies the gates. Returns the outputs
    (T, B, H) (in time order also when ``reverse`` runs from the last step down) and the final h (and c)."""
    if mode not in RNN_GATES:
        raise ValueError(f"recurrence: unknown mode {mode!r}, expected one of {', '.join(RNN_GATES)}")
    check_devices("recurrence", *(x for x in (gx, h0, c0, w_hh, b_hh) if x is not None))
    if w_hh.ndim != 2 or gx.ndim != 3:
        raise ValueError(f"recurrence: expected gx (T, B, G*H) and w_hh (G*H, H), got shapes {list(gx.shape)} and "
                         f"{list(w_hh.shape)}")
    H = w_hh.shape[1]
    T, B, GH = gx.shape
    state = [("h0", h0), ("c0", c0)] if mode == "LSTM" else [("h0", h0)]
    if tuple(w_hh.shape) != (RNN_GATES[mode] * H, H) or GH != RNN_GATES[mode] * H or T < 1 or \
            any(s is None or tuple(s.shape) != (B, H) for _, s in state) or \
            (b_hh is not None and tuple(b_hh.shape) != (GH,)):
        raise ValueError(f"recurrence: mode {mode} expects gx (T >= 1, B, {RNN_GATES[mode]}*H), w_hh "
                         f"({RNN_GATES[mode]}*H, H), b_hh ({RNN_GATES[mode]}*H) and states (B, H), got gx "
                         f"{list(gx.shape)}, w_hh {list(w_hh.shape)}, b_hh "
                         f"{None if b_hh is None else list(b_hh.shape)}, "
                         + ", ".join(f"{n} {None if s is None else list(s.shape)}" for n, s in state))
    tensors = [gx, w_hh] + [s for _, s in state] + ([] if b_hh is None else [b_hh])
    if not gx.dtype.is_floating_point or any(x.dtype is not gx.dtype for x in tensors):
        raise TypeError(f"recurrence: expected floating-point tensors of one dtype, got "
                        f"{', '.join(x.dtype.name for x in tensors)}")
    compute = dt.compute_dtype(gx.dtype)   # (float16 and bfloat16 run in float32, rounded once at the end)
    gx, h0, c0, w_hh, b_hh = (None if x is None else x.to(compute) for x in (gx, h0, c0, w_hh, b_hh))
    out = Recurrence.apply(gx, h0, c0 if mode == "LSTM" else None, w_hh, b_hh, mode, bool(reverse))
    return tuple(o.to(tensors[0].dtype) for o in out)
