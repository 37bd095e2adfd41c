"""ONNX lowerings of nn.functional's activations (``ops/activations.py``): ONNX's own op where its
definition is torch's, else a short composition. See ``lowerings``."""
from __future__ import annotations

import numpy as np

from ..ops.activations import SELU_ALPHA, SELU_SCALE, _prelu_weight, _scalar, _softmin_dim
from ..ops.registry import attach_rule
from .lowerings import _clamp, _dim, _np, _operand, lowers


def _float_value(L, x):
    """x as a value of the output's (float) dtype: integers are computed in floating point."""
    return _operand(L, x, _np(L.out))


@lowers("_hardtanh")
def _hardtanh(L, x, min_val=-1.0, max_val=1.0):
    return _clamp(L, x, _scalar(x, min_val), _scalar(x, max_val))


attach_rule("_relu6", "onnx", lambda L, x: _clamp(L, x, 0, 6))


def _native(op_type, **attributes):
    return lambda L, x: L.op(op_type, _float_value(L, x), **attributes)


attach_rule("_hardswish", "onnx", _native("HardSwish"))
attach_rule("_hardsigmoid", "onnx", _native("HardSigmoid", alpha=1 / 6, beta=0.5))
attach_rule("_mish", "onnx", _native("Mish"))
attach_rule("selu", "onnx", _native("Selu", alpha=SELU_ALPHA, gamma=SELU_SCALE))
attach_rule("softsign", "onnx", _native("Softsign"))


@lowers("tanhshrink")
def _tanhshrink(L, x):
    v = _float_value(L, x)
    return L.op("Sub", v, L.op("Tanh", v))


@lowers("threshold")
def _threshold(L, x, threshold, value):
    dtype = _np(L.out)
    v = L.value(x)
    below = L.op("LessOrEqual", v, L.constant(_scalar(x, threshold), dtype))
    return L.op("Where", below, L.constant(_scalar(x, value), dtype), v)


@lowers("hardshrink")
def _hardshrink(L, x, lambd=0.5):
    return L.op("Shrink", L.value(x), lambd=float(lambd), bias=0.0)


@lowers("softshrink")
def _softshrink(L, x, lambd=0.5):
    return L.op("Shrink", L.value(x), lambd=float(lambd), bias=float(lambd))


@lowers("celu")
def _celu(L, x, alpha=1.0):
    """Composed: ONNX's Celu takes float32 only."""
    dtype = _np(L.out)
    v = L.value(x)
    inside = L.op("Mul", L.op("Min", v, L.constant(0, dtype)), L.constant(1.0 / alpha, dtype))
    curve = L.op("Mul", L.op("Sub", L.op("Exp", inside), L.constant(1, dtype)), L.constant(alpha, dtype))
    return L.op("Where", L.op("LessOrEqual", v, L.constant(0, dtype)), curve, v)


@lowers("glu")
def _glu(L, x, dim=-1):
    a, b = L.op("Split", L.value(x), outputs=2, axis=_dim(dim, x.ndim), num_outputs=2)
    return L.op("Mul", a, L.op("Sigmoid", b))


@lowers("prelu")
def _prelu(L, x, weight):
    shape = tuple(_prelu_weight(x, weight).shape)
    slope = L.op("Reshape", L.value(weight), L.constant(np.array(shape, np.int64)))
    return L.op("PRelu", L.value(x), slope)


@lowers("softmin")
def _softmin(L, x, dim=None, _stacklevel=3, dtype=None):
    value = L.op("Neg", L.value(x))
    if _np(x) != _np(L.out):
        value = L.op("Cast", value, to=L.type_code(L.out.dtype))
    return L.op("Softmax", value, axis=_dim(_softmin_dim(x.ndim) if dim is None else dim, x.ndim))


@lowers("rrelu")
def _rrelu(L, x, lower=1.0 / 8, upper=1.0 / 3, training=False, generator=None):
    if training:
        raise NotImplementedError("minidl.onnx.export: rrelu in training draws a random slope per element, which "
                                  "is not lowered; export the model in eval mode (the mean slope)")
    return L.op("LeakyRelu", L.value(x), alpha=(lower + upper) / 2)
