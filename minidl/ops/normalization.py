"""Normalization layers' ops: layer norm and group norm (one graph node each, on the norm_rows primitives; batch
and instance norm: ``batchnorm.py``); each takes a float16/bfloat16 input with float32 parameters as PyTorch does.
Local response norm is composed: a window average of squares across channels (avg_pool2d over (C, rest))."""
from __future__ import annotations

import math

from ..autograd import grad_mode
from .autocast_mode import autocast_op
from .conv import avg_pool2d
from .norm_rows import _norm_of_mixed_dtypes, check_parameter, norm_rows, trailing_rows
from .registry import op
from .shape_ops import pad


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


@op(method=False, namespace="nn.functional", samples=lambda t: [
    t.S("local_response_norm", lambda x: local_response_norm(x, 3, alpha=0.5, beta=0.75, k=1.5), t.rn(2, 5, 3)),
    t.S("local_response_norm-even-4d", lambda x: local_response_norm(x, 2, alpha=0.3, k=2.0), t.rn(1, 4, 2, 3))])
def local_response_norm(input, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0):
    """input / (k + alpha * mean of the squares of the ``size`` channels around each one) ** beta. The window
    reaches size // 2 channels back and (size - 1) // 2 forward (zeros beyond the edges count in the mean)."""
    if input.ndim < 3:
        raise ValueError(f"local_response_norm: expected 3D or higher dimensionality input (got {input.ndim} "
                         f"dimensions, shape {list(input.shape)})")
    if size < 1:
        raise ValueError(f"local_response_norm: size must be positive, got {size}")
    if input.numel() == 0:
        return input
    squares = (input * input).reshape(input.shape[0], 1, input.shape[1], -1)
    squares = pad(squares, (0, 0, size // 2, (size - 1) // 2))
    mean = avg_pool2d(squares, (size, 1), stride=1).reshape(input.shape)
    return input / (mean * alpha + k) ** beta
