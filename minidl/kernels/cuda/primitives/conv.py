"""Convolution and pooling primitives on the GPU (csrc/conv.cu), with the CPU's geometry checks."""
import numpy as np

from .... import kernels
from ...checks import conv_columns, conv_geometry, pool_buffers
from .. import runtime
from .common import FLOATS, kernel, require_dtype

FILE = "conv"
GEOMETRY = np.dtype([(name, "<i8") for name in ("planes", "h", "w", "kh", "kw", "sh", "sw", "ph", "pw", "dh", "dw",
                                                "oh", "ow")])


def _geometry(g):
    """The kernels' Geometry struct, passed by value."""
    return np.array(tuple(g), GEOMETRY)


def _float_kernel(name, dtype):
    require_dtype(dtype, FLOATS, name)
    return kernel(FILE, name, dtype)


@kernels.register("im2col", "cuda")
def im2col(x, out, geom, channels=0):
    g, c = conv_columns("im2col", x, out, geom, channels)
    n = g[0] * g[3] * g[4] * g[11] * g[12]
    runtime.launch(_float_kernel("im2col", x.dtype), n, x, out, _geometry(g), runtime.i64(c))


@kernels.register("col2im", "cuda")
def col2im(cols, out, geom, channels=0):
    g, c = conv_columns("col2im", out, cols, geom, channels)
    runtime.launch(_float_kernel("col2im", out.dtype), g[0] * g[1] * g[2], cols, out, _geometry(g), runtime.i64(c))


@kernels.register("max_pool2d", "cuda")
def max_pool2d(x, out, index, geom):
    g = conv_geometry(geom, x, None, "max_pool2d")
    n = g[0] * g[11] * g[12]
    pool_buffers("max_pool2d", out, x, index, n)
    if g[1] * g[2]:
        runtime.launch(_float_kernel("max_pool2d", x.dtype), n, x, out, index, _geometry(g))


@kernels.register("max_pool2d_backward", "cuda")
def max_pool2d_backward(grad_out, index, grad_in, geom):
    g = conv_geometry(geom, grad_in, None, "max_pool2d_backward")
    planes, hw, L = g[0], g[1] * g[2], g[11] * g[12]
    pool_buffers("max_pool2d_backward", grad_out, grad_in, index, planes * L, "gradient")
    kern = _float_kernel("max_pool2d_backward", grad_in.dtype)
    grad_in[:planes * hw] = 0
    if hw:
        runtime.launch(kern, planes * L, grad_out, index, grad_in, runtime.i64(planes), runtime.i64(hw),
                       runtime.i64(L))
