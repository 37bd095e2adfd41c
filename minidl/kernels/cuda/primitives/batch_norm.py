"""Batch norm on the GPU (csrc/batch_norm.cu): a block per channel, its statistics, running statistics and
normalisation in one launch, its three gradients in another; the same checks and results as the CPU kernels."""
import numpy as np

from .... import kernels
from ...checks import batch_norm_buffers
from .. import runtime
from .common import kernel

FILE = "batch_norm"


def _pointer(b):
    return runtime.NULL if b is None else b


@kernels.register("batch_norm", "cuda")
def batch_norm(x, out, shape, channels_last, weight, bias, mean, invstd, running_mean, running_var, training,
               momentum, eps):
    N, C, S = batch_norm_buffers("batch_norm", shape, training, (("input", x), ("out", out)), (
        ("weight", weight), ("bias", bias), ("mean", mean), ("invstd", invstd), ("running_mean", running_mean),
        ("running_var", running_var)))
    runtime.launch_rows(kernel(FILE, "batch_norm", x.dtype), C, x, out, runtime.i64(N), runtime.i64(C),
                        runtime.i64(S), runtime.i32(bool(channels_last)), _pointer(weight), _pointer(bias), mean,
                        invstd, _pointer(running_mean), _pointer(running_var), runtime.i32(bool(training)),
                        np.float64(momentum), np.float64(eps))


@kernels.register("batch_norm_backward", "cuda")
def batch_norm_backward(x, g, shape, channels_last, weight, mean, invstd, dx, dweight, dbias, training):
    N, C, S = batch_norm_buffers("batch_norm_backward", shape, True, (("input", x), ("gradient", g), ("dx", dx)), (
        ("weight", weight), ("mean", mean), ("invstd", invstd), ("dweight", dweight), ("dbias", dbias)))
    runtime.launch_rows(kernel(FILE, "batch_norm_backward", x.dtype), C, x, g, dx, runtime.i64(N), runtime.i64(C),
                        runtime.i64(S), runtime.i32(bool(channels_last)), _pointer(weight), mean, invstd, dweight,
                        dbias, runtime.i32(bool(training)))
