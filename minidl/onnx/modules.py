"""ONNX lowerings of whole modules with an ONNX counterpart: ``nn.LSTM``, ``nn.GRU`` and ``nn.RNN``
become ONNX's LSTM, GRU and RNN nodes, one per layer (``MODULES``: module class -> rule). A rule
is called as ``rule(L, module, *args)`` after the module ran, and returns the value names of the
module's output tensors, flattened in order: (output, h_n) or (output, h_n, c_n).

ONNX orders an LSTM's gates i, o, f, c where torch (and minidl) store i, f, g, o, and a GRU's
z, r, h where they store r, z, n; the weights are re-ordered once, at export. A GRU's new gate
applies its hidden bias before the reset gate multiplies it (``linear_before_reset=1``).
The cells (``nn.LSTMCell``, ...) become the same nodes over a sequence of one step.
"""
from __future__ import annotations

import numpy as np

from ..nn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNCell

GATE_ORDER = {"LSTM": [0, 3, 1, 2], "GRU": [1, 0, 2], "RNN": [0]}


def _weights(module, layer, suffix, kind):
    """ONNX's W, R and B of one direction of one layer (layer None: a cell's), as numpy (gates re-ordered)."""
    def gates(a):
        return np.concatenate([a[k] for k in GATE_ORDER[kind]]) if a is not None else None

    def get(name):
        t = getattr(module, name if layer is None else f"{name}_l{layer}{suffix}", None)
        return None if t is None else t.detach().numpy(force=True)
    n = len(GATE_ORDER[kind])

    def split(a):
        return None if a is None else np.split(a, n)
    w, r = gates(split(get("weight_ih"))), gates(split(get("weight_hh")))
    bw, br = get("bias_ih"), get("bias_hh")
    b = None if bw is None else np.concatenate([gates(split(bw)), gates(split(br))])
    return w, r, b


def _recurrent(kind):
    def rule(L, module, input, hx=None):
        if getattr(module, "proj_size", 0):
            raise NotImplementedError("minidl.onnx.export: LSTM with proj_size is not lowered")
        dirs = 2 if module.bidirectional else 1
        hidden, dtype = module.hidden_size, np.dtype(input.dtype.np)
        batched = input.ndim == 3
        x = L.value(input)
        if not batched:
            x = L.op("Unsqueeze", x, L.ints([1]))
        elif module.batch_first:
            x = L.op("Transpose", x, perm=[1, 0, 2])   # (ONNX: sequence first)
        states = [hx] if kind != "LSTM" else (list(hx) if hx is not None else [None])
        state_values = [None if s is None else L.value(s) for s in states]
        if not batched:
            state_values = [None if v is None else L.op("Unsqueeze", v, L.ints([1])) for v in state_values]
        outs_h, outs_c = [], []
        for layer in range(module.num_layers):
            ws, rs, bs = zip(*[_weights(module, layer, "_reverse" if d else "", kind) for d in range(dirs)])
            inputs = [x, L.constant(np.stack(ws)), L.constant(np.stack(rs)),
                      None if bs[0] is None else L.constant(np.stack(bs)), None]
            for v in state_values:
                inputs.append(None if v is None else
                              L.op("Slice", v, L.ints([layer * dirs]), L.ints([(layer + 1) * dirs]), L.ints([0])))
            attributes = dict(hidden_size=hidden, direction="bidirectional" if dirs == 2 else "forward")
            if kind == "GRU":
                attributes["linear_before_reset"] = 1
            if kind == "RNN":
                attributes["activations"] = ["Relu" if module.nonlinearity == "relu" else "Tanh"] * dirs
            results = L.op(kind, *inputs, outputs=3 if kind == "LSTM" else 2, **attributes)
            y = results[0]   # (seq, dirs, batch, hidden)
            outs_h.append(results[1])
            if kind == "LSTM":
                outs_c.append(results[2])
            x = L.op("Reshape", L.op("Transpose", y, perm=[0, 2, 1, 3]), L.ints([0, 0, -1]))
        del dtype
        out = x
        if not batched:
            out = L.op("Squeeze", out, L.ints([1]))
        elif module.batch_first:
            out = L.op("Transpose", out, perm=[1, 0, 2])

        def stacked(parts):
            v = parts[0] if len(parts) == 1 else L.op("Concat", *parts, axis=0)
            return L.op("Squeeze", v, L.ints([1])) if not batched else v
        return (out, stacked(outs_h)) + ((stacked(outs_c),) if kind == "LSTM" else ())
    return rule


def _cell(kind):
    def rule(L, module, input, hx=None):
        lead = L.ints([0] if input.ndim == 2 else [0, 1])   # (ONNX: sequence, batch first)
        states = [] if hx is None else list(hx) if kind == "LSTM" else [hx]
        w, r, b = _weights(module, None, "", kind)
        inputs = [L.op("Unsqueeze", L.value(input), lead), L.constant(w[None]), L.constant(r[None]),
                  None if b is None else L.constant(b[None]), None]
        inputs += [L.op("Unsqueeze", L.value(s), lead) for s in states]
        attributes = dict(hidden_size=module.hidden_size)
        if kind == "GRU":
            attributes["linear_before_reset"] = 1
        if kind == "RNN":
            attributes["activations"] = ["Relu" if module.nonlinearity == "relu" else "Tanh"]
        results = L.op(kind, *inputs, outputs=3 if kind == "LSTM" else 2, **attributes)
        return tuple(L.op("Squeeze", v, lead) for v in results[1:])
    return rule


MODULES = {LSTM: _recurrent("LSTM"), GRU: _recurrent("GRU"), RNN: _recurrent("RNN"), LSTMCell: _cell("LSTM"),
           GRUCell: _cell("GRU"), RNNCell: _cell("RNN")}
