"""Convolution and pooling primitives on the CPU (kernels in ``jit/conv.py``).

All operands are contiguous 1-D buffers from offset 0; ``geom`` is the tuple
``(planes, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow)`` described in
``minidl.kernels``. Sizes are checked here before a kernel runs: Numba does not check.
"""
from ... import kernels
from ..checks import conv_columns, conv_geometry, pool_buffers
from .jit.conv import (col2im_parallel, col2im_serial, im2col_parallel, im2col_serial, max_pool2d_backward_parallel,
                  max_pool2d_backward_serial, max_pool2d_parallel, max_pool2d_serial)
from .strided import launch


@kernels.register("im2col")
def im2col(x, out, geom, channels=0):
    g, c = conv_columns("im2col", x, out, geom, channels)
    if g[0] * g[3] * g[4] * g[11] * g[12]:
        launch(im2col_serial, im2col_parallel, g[0] * g[3] * g[4] * g[11] * g[12], x, out, c, *g)


@kernels.register("col2im")
def col2im(cols, out, geom, channels=0):
    g, c = conv_columns("col2im", out, cols, geom, channels)
    if g[0] * g[1] * g[2]:
        launch(col2im_serial, col2im_parallel, g[0] * (g[1] * g[2] + g[3] * g[4] * g[11] * g[12]), cols, out, c, *g)


@kernels.register("max_pool2d")
def max_pool2d(x, out, index, geom):
    g = conv_geometry(geom, x, None, "max_pool2d")
    n = g[0] * g[11] * g[12]
    pool_buffers("max_pool2d", out, x, index, n)
    if n and g[1] * g[2]:
        launch(max_pool2d_serial, max_pool2d_parallel, n * g[3] * g[4], x, out, index, *g)


@kernels.register("max_pool2d_backward")
def max_pool2d_backward(grad_out, index, grad_in, geom):
    g = conv_geometry(geom, grad_in, None, "max_pool2d_backward")
    planes, hw, L = g[0], g[1] * g[2], g[11] * g[12]
    pool_buffers("max_pool2d_backward", grad_out, grad_in, index, planes * L, "gradient")
    if planes * hw:
        launch(max_pool2d_backward_serial, max_pool2d_backward_parallel, planes * (hw + L), grad_out, index,
               grad_in, planes, hw, L)
