"""Recurrent layers (RNN, LSTM, GRU) and their one-step cells, with PyTorch's parameters, shapes and init.

A layer projects the inputs of every time step in one matmul per layer and direction; the recurrent part
(per step the hidden-to-hidden product and the gates, one fused kernel) is one autograd node per layer and
direction (``F._recurrence``), whose backward runs the steps in reverse. A cell is that node over one step.
Only LSTM with proj_size runs its steps as composed ops.
"""
from __future__ import annotations

import math
import numbers
import warnings

import minidl

from . import functional as F
from . import init
from .module import Module
from .parameter import Parameter


def _projected_lstm_step(gi, state, w_hh, b_hh, w_hr):
    """One LSTM step with h projected by w_hr (proj_size): composed of ops, where the gate kernel has no
    projection."""
    h, c = state
    i, f, g, o = (gi + F.linear(h, w_hh, b_hh)).chunk(4, -1)
    c = f.sigmoid() * c + i.sigmoid() * g.tanh()
    return (F.linear(o.sigmoid() * c.tanh(), w_hr), c)


_GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}   # gates per hidden unit of each mode


def _check_positive(owner, arg, value):
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{owner}: {arg} must be a positive integer, got {value!r}")


def _rnn_mode(nonlinearity, owner):
    if nonlinearity not in ("tanh", "relu"):
        raise ValueError(f"{owner}: unknown nonlinearity {nonlinearity!r}, expected 'tanh' or 'relu'")
    return "RNN_" + nonlinearity.upper()


class _RecurrentBase(Module):
    """What layers and cells share: registering one set of weights, the init, and checking input and state."""

    def _add_weights(self, suffix, input_size, gate_size, hidden_size, proj_size, bias, factory):
        """Register weight_ih/weight_hh/bias_ih/bias_hh(/weight_hr) + suffix in PyTorch's order; returns
        their names as (w_ih, w_hh, b_ih, b_hh, w_hr), None for the absent ones."""
        shapes = {"weight_ih": (gate_size, input_size), "weight_hh": (gate_size, proj_size or hidden_size)}
        if bias:
            shapes.update(bias_ih=(gate_size,), bias_hh=(gate_size,))
        if proj_size:
            shapes["weight_hr"] = (proj_size, hidden_size)
        for kind, shape in shapes.items():
            setattr(self, kind + suffix, Parameter(minidl.empty(shape, **factory)))
        return tuple(kind + suffix if kind in shapes else None
                     for kind in ("weight_ih", "weight_hh", "bias_ih", "bias_hh", "weight_hr"))

    def reset_parameters(self) -> None:
        """Every parameter ~ U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)), as PyTorch."""
        bound = 1.0 / math.sqrt(self.hidden_size)
        for p in self.parameters():
            init.uniform_(p, -bound, bound)

    def _check_input(self, x, weight_ih):
        name = type(self).__name__
        if x.shape[-1] != self.input_size:
            raise RuntimeError(f"{name}: input of shape {list(x.shape)} has {x.shape[-1]} features, "
                               f"expected input_size={self.input_size}")
        if x.dtype is not weight_ih.dtype:
            raise RuntimeError(f"{name}: input dtype {x.dtype} doesn't match the parameters' dtype "
                               f"{weight_ih.dtype}")

    def _initial_state(self, hx, input, shapes, names):
        """hx as a tuple ((h,) or (h, c)) of tensors of the given shapes; zeros when hx is None."""
        if hx is None:
            return tuple(minidl.zeros(s, dtype=input.dtype, device=input.device) for s in shapes)
        owner = type(self).__name__
        if len(shapes) == 2:
            if not isinstance(hx, (tuple, list)) or len(hx) != 2:
                raise TypeError(f"{owner}: expected the state as a tuple ({', '.join(names)}), got "
                                f"{type(hx).__name__}")
        else:
            hx = (hx,)
        for t, shape, name in zip(hx, shapes, names):
            if tuple(t.shape) != shape or t.dtype is not input.dtype:
                raise RuntimeError(f"{owner}: for input of shape {list(input.shape)} expected {name} of shape "
                                   f"{list(shape)} and dtype {input.dtype}, got {list(t.shape)} {t.dtype}")
        return tuple(hx)


class RNNBase(_RecurrentBase):
    """A stack of recurrent layers (mode RNN_TANH, RNN_RELU, LSTM or GRU), optionally bidirectional."""

    def __init__(self, mode, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, proj_size: int = 0,
                 device=None, dtype=None):
        super().__init__()
        name = type(self).__name__
        if mode not in _GATES:
            raise ValueError(f"{name}: unknown mode {mode!r}, expected one of {sorted(_GATES)}")
        if not isinstance(dropout, numbers.Number) or isinstance(dropout, bool) or not 0 <= dropout <= 1:
            raise ValueError(f"{name}: dropout must be a probability in [0, 1], got {dropout!r}")
        _check_positive(name, "hidden_size", hidden_size)
        _check_positive(name, "num_layers", num_layers)
        if proj_size and mode != "LSTM":
            raise ValueError(f"{name}: proj_size is only supported by LSTM")
        if not isinstance(proj_size, int) or not (proj_size == 0 or 0 < proj_size < hidden_size):
            raise ValueError(f"{name}: proj_size must be an integer in [0, hidden_size={hidden_size}), "
                             f"got {proj_size!r}")
        if dropout > 0 and num_layers == 1:
            warnings.warn(f"{name}: dropout={dropout} acts between stacked layers only (never after the last), "
                          "so with num_layers=1 it does nothing", stacklevel=2)
        self.mode = mode
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.bias, self.batch_first, self.bidirectional = bias, batch_first, bidirectional
        self.dropout, self.proj_size = float(dropout), proj_size
        gates = _GATES[mode]
        directions = 2 if bidirectional else 1
        out_size = proj_size or hidden_size
        factory = {"device": device, "dtype": dtype}
        # names per (layer, direction), in the order of h0's first dimension
        self._weight_names = [
            self._add_weights(f"_l{layer}" + ("_reverse" if d else ""),
                              input_size if layer == 0 else out_size * directions, gates * hidden_size,
                              hidden_size, proj_size, bias, factory)
            for layer in range(num_layers) for d in range(directions)]
        self.reset_parameters()

    @property
    def all_weights(self):
        """The parameters grouped by layer and direction, as PyTorch lists them."""
        return [[getattr(self, n) for n in names if n is not None] for names in self._weight_names]

    def flatten_parameters(self) -> None:
        """No-op: PyTorch packs the weights for cuDNN here; kept so PyTorch scripts run unchanged."""

    def _state_shapes(self, batch):
        lead = (self.num_layers * (2 if self.bidirectional else 1),) + (() if batch is None else (batch,))
        h = lead + (self.proj_size or self.hidden_size,)
        return (h, lead + (self.hidden_size,)) if self.mode == "LSTM" else (h,)

    def forward(self, input, hx=None):
        name = type(self).__name__
        if input.ndim not in (2, 3):
            raise ValueError(f"{name}: expected a 2-D (unbatched) or 3-D (batched) input, got shape "
                             f"{list(input.shape)}")
        self._check_input(input, getattr(self, self._weight_names[0][0]))
        batched = input.ndim == 3
        x = input if batched else input.unsqueeze(1)
        if batched and self.batch_first:
            x = x.transpose(0, 1)
        seq_len, batch = x.shape[0], x.shape[1]
        if seq_len == 0:
            raise RuntimeError(f"{name}: expected a sequence of at least one step, got input of shape "
                               f"{list(input.shape)}")
        names = ("h0", "c0") if self.mode == "LSTM" else ("h0",)
        hx = self._initial_state(hx, input, self._state_shapes(batch if batched else None), names)
        if not batched:
            hx = tuple(t.unsqueeze(1) for t in hx)
        starts = list(zip(*(t.unbind(0) for t in hx)))   # one state tuple per (layer, direction)
        directions = 2 if self.bidirectional else 1
        finals = []
        for layer in range(self.num_layers):
            outputs = []
            for d in range(directions):
                k = layer * directions + d
                w_ih, w_hh, b_ih, b_hh, w_hr = (None if n is None else getattr(self, n)
                                                for n in self._weight_names[k])
                projected = F.linear(x.reshape(-1, x.shape[-1]), w_ih, b_ih).reshape(seq_len, batch, -1)  # one GEMM
                if w_hr is None:
                    start = starts[k]
                    out, *state = F._recurrence(projected, start[0], start[1] if len(start) == 2 else None, w_hh,
                                                b_hh, self.mode, bool(d))
                    outputs.append(out)
                    finals.append(tuple(state))
                    continue
                state, steps = starts[k], [None] * seq_len
                for t in (reversed(range(seq_len)) if d else range(seq_len)):
                    state = _projected_lstm_step(projected[t], state, w_hh, b_hh, w_hr)
                    steps[t] = state[0]
                outputs.append(minidl.stack(steps))
                finals.append(state)
            x = outputs[0] if directions == 1 else minidl.cat(outputs, -1)
            if layer < self.num_layers - 1:
                x = F.dropout(x, self.dropout, self.training)
        last = tuple(minidl.stack(s) for s in zip(*finals))
        if not batched:
            x, last = x.squeeze(1), tuple(t.squeeze(1) for t in last)
        elif self.batch_first:
            x = x.transpose(0, 1)
        return (x, last) if self.mode == "LSTM" else (x, last[0])

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.proj_size:
            s += f", proj_size={self.proj_size}"
        if self.mode == "RNN_RELU":
            s += ", nonlinearity=relu"   # PyTorch's layer omits it; its cell prints it so
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        for arg, default in (("bias", True), ("batch_first", False), ("dropout", 0.0), ("bidirectional", False)):
            if getattr(self, arg) != default:
                s += f", {arg}={getattr(self, arg)}"
        return s


class RNN(RNNBase):
    """Elman RNN: h_t = tanh (or relu)(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh)."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, nonlinearity: str = "tanh",
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 device=None, dtype=None):
        super().__init__(_rnn_mode(nonlinearity, "RNN"), input_size, hidden_size, num_layers, bias, batch_first,
                         dropout, bidirectional, device=device, dtype=dtype)
        self.nonlinearity = nonlinearity


class LSTM(RNNBase):
    """Long short-term memory, gates in PyTorch's order (input, forget, cell, output); proj_size projects h."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, proj_size: int = 0,
                 device=None, dtype=None):
        super().__init__("LSTM", input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         proj_size, device, dtype)


class GRU(RNNBase):
    """Gated recurrent unit, gates in PyTorch's order (reset, update, new); r scales W_hn h + b_hn."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, device=None,
                 dtype=None):
        super().__init__("GRU", input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         device=device, dtype=dtype)


class RNNCellBase(_RecurrentBase):
    """One time step of a recurrent layer: parameters weight_ih, weight_hh, bias_ih, bias_hh."""

    def __init__(self, mode, input_size: int, hidden_size: int, bias: bool = True, device=None, dtype=None):
        super().__init__()
        _check_positive(type(self).__name__, "hidden_size", hidden_size)
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias
        self._mode = mode
        gates = _GATES[mode]
        self._add_weights("", input_size, gates * hidden_size, hidden_size, 0, bias,
                                        {"device": device, "dtype": dtype})
        if not bias:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self.reset_parameters()

    def forward(self, input, hx=None):
        name = type(self).__name__
        if input.ndim not in (1, 2):
            raise ValueError(f"{name}: expected a 1-D (unbatched) or 2-D (batched) input, got shape "
                             f"{list(input.shape)}")
        self._check_input(input, self.weight_ih)
        batched = input.ndim == 2
        x = input if batched else input.unsqueeze(0)
        lstm = self._mode == "LSTM"
        shape = (x.shape[0], self.hidden_size) if batched else (self.hidden_size,)
        state = self._initial_state(hx, input, (shape,) * (2 if lstm else 1), ("hx", "cx") if lstm else ("hx",))
        if not batched:
            state = tuple(t.unsqueeze(0) for t in state)
        gx = F.linear(x, self.weight_ih, self.bias_ih).unsqueeze(0)
        state = F._recurrence(gx, state[0], state[1] if lstm else None, self.weight_hh, self.bias_hh, self._mode)[1:]
        if not batched:
            state = tuple(t.squeeze(0) for t in state)
        return state if lstm else state[0]

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if not self.bias:
            s += ", bias=False"
        if getattr(self, "nonlinearity", "tanh") != "tanh":
            s += f", nonlinearity={self.nonlinearity}"
        return s


class RNNCell(RNNCellBase):
    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, nonlinearity: str = "tanh",
                 device=None, dtype=None):
        super().__init__(_rnn_mode(nonlinearity, "RNNCell"), input_size, hidden_size, bias, device, dtype)
        self.nonlinearity = nonlinearity


class LSTMCell(RNNCellBase):
    """Returns (h', c')."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device=None, dtype=None):
        super().__init__("LSTM", input_size, hidden_size, bias, device, dtype)


class GRUCell(RNNCellBase):
    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device=None, dtype=None):
        super().__init__("GRU", input_size, hidden_size, bias, device, dtype)
