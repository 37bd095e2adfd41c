"""Normalization layers' ops: layer norm and group norm (one graph node each, on the norm_rows primitives; batch
norm: ``batchnorm.py``); each takes a float16/bfloat16 input with float32 parameters as PyTorch does."""
from __future__ import annotations

import math

from ..autograd import grad_mode
from .autocast_mode import autocast_op
from .norm_rows import _norm_of_mixed_dtypes, check_parameter, norm_rows, trailing_rows
from .registry import op


def _layer_norm_samples(t):
    return [
        t.S("layer_norm", lambda x, w, b: layer_norm(x, (4,), w, b), t.rn(3, 4), t.rn(4), t.rn(4)),
        t.S("layer_norm-2d-shape-noncontig", lambda x, w: layer_norm(x, (3, 4), w, eps=1e-3),
            t.NC(t.rn(2, 3, 4), "gap"), t.NC(t.rn(3, 4), "F")),
        t.S("layer_norm-no-affine", lambda x: layer_norm(x, 4) ** 2, t.rn(2, 4), second_order=True),
        t.S("layer_norm-affine", lambda x, w: layer_norm(x, (3,), w), t.rn(2, 3), t.rn(3), second_order=True),
    ]


@op(method=False, samples=_layer_norm_samples)
@autocast_op("layer_norm")
@_norm_of_mixed_dtypes
def layer_norm(input, normalized_shape, weight=None, bias=None, eps: float = 1e-5):
    normalized_shape, n = trailing_rows("layer_norm", input, normalized_shape)
    check_parameter("layer_norm", weight, normalized_shape, "weight")
    check_parameter("layer_norm", bias, normalized_shape, "bias")
    return norm_rows("layer_norm", input, weight, bias, n, 1, 1, eps, False)


def _channel_shape(input):
    return (1, input.shape[1]) + (1,) * (input.ndim - 2)


@op(method=False, samples=lambda t: [
    t.S("group_norm", lambda x, w, b: group_norm(x, 2, w, b), t.rn(2, 4, 3), t.rn(4), t.rn(4)),
])
@autocast_op("group_norm")
@_norm_of_mixed_dtypes
def group_norm(input, num_groups: int, weight=None, bias=None, eps: float = 1e-5):
    if input.ndim < 2 or input.shape[1] % num_groups:
        raise RuntimeError(f"group_norm: expected an input with a channel count divisible by {num_groups}, "
                           f"got shape {list(input.shape)}")
    channels = input.shape[1]
    check_parameter("group_norm", weight, (channels,), "weight")
    check_parameter("group_norm", bias, (channels,), "bias")
    span = math.prod(input.shape[2:])
    return norm_rows("group_norm", input, weight, bias, channels // num_groups * span, span, num_groups, eps, False)
