"""Normalization layers' ops: layer norm and group norm (one graph node each, on the norm_rows primitives), batch
norm; each takes a float16/bfloat16 input with float32 parameters as PyTorch does."""
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


@op(method=False, namespace="nn.functional", samples=lambda t: [  # (torch.batch_norm orders its arguments otherwise)
    t.S("batch_norm-training", lambda x, w, b: batch_norm(x, None, None, w, b, training=True), t.rn(4, 3, 2),
        t.rn(3), t.rn(3)),
    t.S("batch_norm-eval", lambda x: batch_norm(x, t.const([0.5, -1.0]), t.const([2.0, 0.5]), training=False),
        t.NC(t.rn(3, 2, 2, 2), "gap")),
])
@autocast_op("batch_norm")
@_norm_of_mixed_dtypes
def batch_norm(input, running_mean, running_var, weight=None, bias=None, training: bool = False,
               momentum: float = 0.1, eps: float = 1e-5):
    """Normalize over every dim but the channel dim 1. In training mode the batch statistics are used and
    the running ones (when given) updated in place with the unbiased variance; else the running ones are used."""
    if input.ndim < 2 and input.numel() == 0:
        return input.clone()  # (torch's one 1-D case: no channels and no values, nothing to normalise)
    if input.ndim < 2:
        raise ValueError(f"batch_norm: expected at least 2D input, got {input.ndim}D")
    shape = _channel_shape(input)
    dims = (0,) + tuple(range(2, input.ndim))
    if training:
        count = math.prod(input.shape) // input.shape[1] if input.shape[1] else 0
        if count == 1:  # (no values is an empty batch: an empty result, the running statistics kept, as PyTorch)
            raise ValueError(f"Expected more than 1 value per channel when training, got input size "
                             f"{list(input.shape)}")
        mean = input.mean(dims, keepdim=True)
        var = ((input - mean) ** 2).mean(dims, keepdim=True)
        if count and (running_mean is not None or running_var is not None):
            with grad_mode.no_grad():
                m = 0.1 if momentum is None else momentum
                if running_mean is not None:
                    running_mean.mul_(1 - m).add_(mean.reshape(-1).detach() * m)
                if running_var is not None:
                    running_var.mul_(1 - m).add_(var.reshape(-1).detach() * (m * count / (count - 1)))
    else:
        if running_mean is None or running_var is None:
            raise ValueError("batch_norm: running_mean and running_var are required in eval mode")
        mean, var = running_mean.reshape(shape), running_var.reshape(shape)
    out = (input - mean) * (var + eps).rsqrt()
    if weight is not None:
        out = out * weight.reshape(shape)
    if bias is not None:
        out = out + bias.reshape(shape)
    return out


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
