"""Convolution and pooling primitives on the CPU (kernels in ``jit.py``).

All operands are contiguous 1-D buffers from offset 0; ``geom`` is the tuple
``(planes, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow)`` described in
``minidl.kernels``. Sizes are checked here before a kernel runs: Numba does not check.
"""
from .. import kernels
from .jit import (col2im_parallel, col2im_serial, im2col_parallel, im2col_serial, max_pool2d_backward_parallel,
                  max_pool2d_backward_serial, max_pool2d_parallel, max_pool2d_serial)
from .strided import launch


def _check(geom, image, cols, name):
    if len(geom) != 13:
        raise ValueError(f"{name}: expected 13 geometry values, got {len(geom)}")
    planes, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow = (int(v) for v in geom)
    if min(planes, h, w, oh, ow, ph, pw) < 0 or min(kh, kw, sh, sw, dh, dw) < 1:
        raise ValueError(f"{name}: invalid geometry {geom}")
    if image.size < planes * h * w:
        raise ValueError(f"{name}: image buffer has {image.size} elements, needs {planes * h * w}")
    if cols is not None and cols.size < planes * kh * kw * oh * ow:
        raise ValueError(f"{name}: column buffer has {cols.size} elements, needs {planes * kh * kw * oh * ow}")
    return planes, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow


def _channels(channels, planes, name):
    """The C of the (C*kh*kw, planes/C, oh*ow) column layout; 0 means planes (unfold's layout)."""
    c = int(channels) or planes
    if planes and (c < 1 or planes % c):
        raise ValueError(f"{name}: channels={channels} does not divide the {planes} planes")
    return c or 1


@kernels.register("im2col")
def im2col(x, out, geom, channels=0):
    g = _check(geom, x, out, "im2col")
    c = _channels(channels, g[0], "im2col")
    if out.dtype != x.dtype:
        raise TypeError("im2col: dtypes differ")
    if g[0] * g[3] * g[4] * g[11] * g[12]:
        launch(im2col_serial, im2col_parallel, g[0] * g[3] * g[4] * g[11] * g[12], x, out, c, *g)


@kernels.register("col2im")
def col2im(cols, out, geom, channels=0):
    g = _check(geom, out, cols, "col2im")
    c = _channels(channels, g[0], "col2im")
    if out.dtype != cols.dtype:
        raise TypeError("col2im: dtypes differ")
    if g[0] * g[1] * g[2]:
        launch(col2im_serial, col2im_parallel, g[0] * (g[1] * g[2] + g[3] * g[4] * g[11] * g[12]), cols, out, c, *g)


@kernels.register("max_pool2d")
def max_pool2d(x, out, index, geom):
    g = _check(geom, x, None, "max_pool2d")
    n = g[0] * g[11] * g[12]
    if out.size < n or index.size < n or out.dtype != x.dtype or index.dtype.kind != "i" or index.itemsize != 8:
        raise ValueError("max_pool2d: output or index buffer too small or of the wrong dtype")
    if n and g[1] * g[2]:
        launch(max_pool2d_serial, max_pool2d_parallel, n * g[3] * g[4], x, out, index, *g)


@kernels.register("max_pool2d_backward")
def max_pool2d_backward(grad_out, index, grad_in, geom):
    g = _check(geom, grad_in, None, "max_pool2d_backward")
    planes, hw, L = g[0], g[1] * g[2], g[11] * g[12]
    if grad_out.size < planes * L or index.size < planes * L or grad_out.dtype != grad_in.dtype \
            or index.dtype.kind != "i" or index.itemsize != 8:
        raise ValueError("max_pool2d_backward: gradient or index buffer too small or of the wrong dtype")
    if planes * hw:
        launch(max_pool2d_backward_serial, max_pool2d_backward_parallel, planes * (hw + L), grad_out, index,
               grad_in, planes, hw, L)
