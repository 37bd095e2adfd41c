"""Batch norm on the CPU (kernels in ``jit/batch_norm.py``): statistics, running statistics and the affine
normalisation in one launch, and the three gradients in one more, where the composed form takes ~15 ops forward
and ~30 backward."""
import numpy as np

from ... import kernels
from ..checks import batch_norm_buffers
from .jit.batch_norm import (batch_norm_backward_parallel, batch_norm_backward_serial, batch_norm_parallel,
                             batch_norm_serial)
from .strided import launch


def _blocks(C, rows):
    """Parallel work items: a channel each for planes, up to 16 blocks of 16+ channels for rows."""
    return max(1, min(16, C // 16)) if rows else C


def _or(b, fill, C, dtype):
    """``b``, or C elements of ``fill`` standing in for an absent buffer (one compilation for both)."""
    return b if b is not None else np.full(C, fill, dtype)


@kernels.register("batch_norm")
def batch_norm(x, out, shape, channels_last, weight, bias, mean, invstd, running_mean, running_var, training,
               momentum, eps):
    N, C, S = batch_norm_buffers("batch_norm", shape, training, (("input", x), ("out", out)), (
        ("weight", weight), ("bias", bias), ("mean", mean), ("invstd", invstd), ("running_mean", running_mean),
        ("running_var", running_var)))
    update = bool(training) and running_mean is not None and running_var is not None and N * S > 0
    rows = bool(channels_last)
    launch(batch_norm_serial, batch_norm_parallel, N * C * S, x, out, N, C, S, rows, _or(weight, 1, C, x.dtype),
           _or(bias, 0, C, x.dtype), mean, invstd, _or(running_mean, 0, 0, x.dtype), _or(running_var, 0, 0, x.dtype),
           bool(training), update, float(momentum), float(eps), _blocks(C, rows))


@kernels.register("batch_norm_backward")
def batch_norm_backward(x, g, shape, channels_last, weight, mean, invstd, dx, dweight, dbias, training):
    N, C, S = batch_norm_buffers("batch_norm_backward", shape, True, (("input", x), ("gradient", g), ("dx", dx)), (
        ("weight", weight), ("mean", mean), ("invstd", invstd), ("dweight", dweight), ("dbias", dbias)))
    rows = bool(channels_last)
    launch(batch_norm_backward_serial, batch_norm_backward_parallel, N * C * S, x, g, dx, N, C, S, rows,
           _or(weight, 1, C, x.dtype), mean, invstd, dweight, dbias, bool(training), _blocks(C, rows))
