"""Convolution and pooling: im2col / col2im (a Function pair, each the other's adjoint), conv2d and
conv_transpose2d built on them and matmul, max pooling with argmax indices, average pooling.

Every size is validated here before a kernel runs (Numba does not check bounds).
"""
from __future__ import annotations

import numpy as np

from .. import _dtype as dt
from ..autograd import Function
from . import views
from .autocast_mode import autocast_op
from .core import cast, check_devices, grad_enabled, kernel, packed_buffer
from .elementwise import div
from .creation import empty, tensor
from .shape_ops import pad
from .registry import op


def _pair(v, name):
    if isinstance(v, (list, tuple)):
        if len(v) == 1:
            v = (v[0], v[0])
        if len(v) != 2:
            raise ValueError(f"{name} must be an int or a pair of ints, got {v}")
        return int(v[0]), int(v[1])
    return int(v), int(v)


def _compute(op, x):
    """The kernels' dtype: float32/float64, or int64 for an integer input (PyTorch convolves and pools
    those too, exactly, in the input's dtype)."""
    if x.dtype is dt.bool_:
        raise RuntimeError(f"{op}: expected a floating-point or integer input, got {x.dtype.name}")
    return dt.compute_dtype(x.dtype)


def _geometry(op, h, w, k, s, p, d, ceil_mode=False):
    """Output size of a sliding window over (h, w); raises on bad arguments."""
    return output_sizes(op, (h, w), k, s, p, d, ceil_mode)


def output_sizes(op, sizes, k, s, p, d, ceil_mode=False):
    """Output sizes of a sliding window over the spatial ``sizes`` (one entry of k, s, p, d per size), as
    torch's pooling_output_shape; raises on bad arguments."""
    for name, v, lo in (("kernel_size", k, 1), ("stride", s, 1), ("dilation", d, 1), ("padding", p, 0)):
        if min(v) < lo:
            raise RuntimeError(f"{op}: {name} must be >= {lo}, got {v}")
    out = []
    for n, kk, ss, pp, dd in zip(sizes, k, s, p, d):
        span = n + 2 * pp - dd * (kk - 1) - 1
        if ceil_mode:
            o = -(-span // ss) + 1 if span >= 0 else 0
            if o > 0 and (o - 1) * ss >= n + pp:  # the last window must start inside the input or left pad
                o -= 1
        else:
            o = span // ss + 1 if span >= 0 else 0
        if o <= 0:
            shown = "x".join(str(v) for v in sizes)
            raise RuntimeError(f"{op}: input size ({shown}) with padding {p} is too small for kernel {k} "
                               f"with dilation {d}: output size would be {o}")
        out.append(o)
    return tuple(out)


def _columns(x, geom, channel_major):
    """im2col of ``x`` in its compute dtype, without autograd (see Im2Col)."""
    n, c, h, w = x.shape
    kh, kw, oh, ow = geom[0], geom[1], geom[8], geom[9]
    compute = _compute("im2col", x)
    xc = cast(x, compute)
    shape = (c * kh * kw, n * oh * ow) if channel_major else (n, c * kh * kw, oh * ow)
    out = empty(*shape, dtype=compute, device=x.device)                     # im2col writes every entry
    kernel("im2col", x)(packed_buffer(xc), packed_buffer(out), (n * c, h, w) + tuple(geom),
                        c if channel_major else 0)
    return out


class Im2Col(Function):
    """(N, C, H, W) -> every window of the input as a column: (N, C*kh*kw, oh*ow) as unfold returns
    it, or with ``channel_major`` (C*kh*kw, N*oh*ow), the layout that makes a convolution one GEMM."""

    @staticmethod
    def forward(ctx, x, geom, channel_major=False):
        out = _columns(x, geom, channel_major)
        ctx.shape, ctx.geom, ctx.channel_major = tuple(x.shape), geom, channel_major
        return cast(out, x.dtype)

    @staticmethod
    def backward(ctx, g):
        return Col2Im.apply(g, ctx.shape, ctx.geom, ctx.channel_major), None, None


class Col2Im(Function):
    """The adjoint of Im2Col: sums every column entry back into the image position it came from."""

    @staticmethod
    def forward(ctx, cols, shape, geom, channel_major=False):
        n, c, h, w = shape
        kh, kw, oh, ow = geom[0], geom[1], geom[8], geom[9]
        expect = (c * kh * kw, n * oh * ow) if channel_major else (n, c * kh * kw, oh * ow)
        if tuple(cols.shape) != expect:
            raise RuntimeError(f"col2im: expected columns of shape {expect}, got {tuple(cols.shape)}")
        compute = _compute("col2im", cols)
        cc = cast(cols, compute)
        out = empty(n, c, h, w, dtype=compute, device=cols.device)          # col2im overwrites every entry
        kernel("col2im", cols)(packed_buffer(cc), packed_buffer(out), (n * c, h, w) + tuple(geom),
                               c if channel_major else 0)
        ctx.geom, ctx.channel_major = geom, channel_major
        return cast(out, cols.dtype)

    @staticmethod
    def backward(ctx, g):
        return Im2Col.apply(g, ctx.geom, ctx.channel_major), None, None, None


def _pointwise(geom, groups, positions) -> bool:
    """Whether a convolution is a 1x1 one without padding over enough positions per image that multiplying each
    image's (C, L) pixels by the (O, C) weight beats gathering columns: that product is already the output's
    (N, O, L) layout, so neither the columns nor the permuting copy of the output is made (backward makes the
    columns when it needs them)."""
    return groups == 1 and geom[:2] == (1, 1) and geom[4:6] == (0, 0) and positions >= _POINTWISE_MIN_POSITIONS


# at 7 x 7 positions one (O, C) x (C, N*L) product is faster; from 14 x 14 up the per-image products win (ResNet-50,
# batch 8, 224 x 224: 792 ms against 868 ms a forward on the 2-core VM of benchmarks/README.md)
_POINTWISE_MIN_POSITIONS = 100


class Convolution(Function):
    """conv2d as one GEMM per group over all N*oh*ow window positions.

    Forward: cols = im2col(x) laid out (C*kh*kw, N*L) (L = oh*ow), Y = W (O, C*kh*kw) @ cols ->
    (O, N, L), and one pass that adds the bias while permuting Y to the (N, O, oh, ow) output.
    The columns are kept for the weight gradient and dropped as soon as it is made; backward
    recomputes them when they are gone (a second backward) or must be differentiable (create_graph).
    Backward: g' = g permuted to (O, N*L) once; grad W = g' @ cols^T, grad cols = W^T @ g' (then
    col2im), grad bias = g' summed over N*L. Written with differentiable ops, so it has a backward too.
    """

    @staticmethod
    def forward(ctx, x, weight, bias, geom, groups):
        n, c, h, w = x.shape
        o = weight.shape[0]
        L = geom[8] * geom[9]
        if _pointwise(geom, groups, L):
            taps = x[:, :, ::geom[2], ::geom[3]] if geom[2:4] != (1, 1) else x
            y, cols = weight.reshape(o, c) @ taps.reshape(n, c, L), None    # (N, O, L): the output's layout
        else:
            cols = cast(_columns(x, geom, True), x.dtype)                   # (C*kh*kw, N*L), exact
            if groups == 1:
                y = weight.reshape(o, -1) @ cols                            # (O, N*L)
            else:
                y = weight.reshape(groups, o // groups, -1) @ cols.reshape(groups, -1, n * L)
            y = y.reshape(o, n, L).permute(1, 0, 2)                         # (N, O, L) view
        out = y + bias.reshape(1, o, 1) if bias is not None else y.contiguous()
        if ctx._recording:
            ctx.save_for_backward(x, weight)
            ctx.geom, ctx.groups = geom, groups
            ctx.cols = cols if ctx.needs_input_grad[1] else None            # not a graph input: no version
        return out.reshape(n, o, geom[8], geom[9])

    @staticmethod
    def backward(ctx, g):
        x, weight = ctx.saved_tensors
        n, o, oh, ow = g.shape
        G, L = ctx.groups, oh * ow
        needs = ctx.needs_input_grad
        gt = g.reshape(n, o, L).permute(1, 0, 2).reshape(G, o // G, n * L)  # one transposing copy
        gx = gw = gb = None
        if needs[1]:
            cols, ctx.cols = ctx.cols, None
            if cols is None or grad_enabled():
                cols = Im2Col.apply(x, ctx.geom, True)
            gw = (gt @ cols.reshape(G, -1, n * L).mT).reshape(weight.shape)
            del cols
        if needs[0]:
            gcols = weight.reshape(G, o // G, -1).mT @ gt                   # (G, C/G*kh*kw, N*L)
            gx = Col2Im.apply(gcols.reshape(-1, n * L), tuple(x.shape), ctx.geom, True)
        if needs[2]:
            gb = gt.reshape(o, n * L).sum(1)
        return gx, gw, gb, None, None


class MaxPool2d(Function):
    """Window maxima and their int64 positions in the (H*W) plane (ties: the first wins)."""

    @staticmethod
    def forward(ctx, x, geom):
        n, c, h, w = x.shape
        oh, ow = geom[8], geom[9]
        compute = _compute("max_pool2d", x)
        xc = cast(x, compute)
        out = empty(n, c, oh, ow, dtype=compute, device=x.device)           # the kernel writes every entry
        idx = empty(n, c, oh, ow, dtype=dt.int64, device=x.device)
        kernel("max_pool2d", x)(packed_buffer(xc), packed_buffer(out), packed_buffer(idx),
                                (n * c, h, w) + tuple(geom))
        # without padding every window has a tap in the image; with it one may lie in the padding (meta: no taps)
        if (geom[4] or geom[5]) and out.numel() and not idx.is_meta and int(idx.min()) < 0:
            raise RuntimeError("max_pool2d: a pooling window lies entirely in the padding")
        ctx.mark_non_differentiable(idx)
        ctx.set_materialize_grads(False)                                     # no zeros for idx's gradient
        if ctx._recording:
            ctx.save_for_backward(idx)
            ctx.shape, ctx.geom = tuple(x.shape), geom
        return cast(out, x.dtype), idx

    @staticmethod
    def backward(ctx, g, _gidx=None):
        (idx,) = ctx.saved_tensors
        return MaxPool2dGrad.apply(g, idx, ctx.shape, ctx.geom), None


class MaxPool2dGrad(Function):
    """The backward of max pooling: each window's gradient added at its argmax (zero elsewhere).
    Linear in g; its own backward is the gather of the incoming gradient by the same indices."""

    @staticmethod
    def forward(ctx, g, idx, shape, geom):
        n, c, h, w = shape
        compute = _compute("max_pool2d_backward", g)
        gc = cast(g, compute)
        out = empty(n, c, h, w, dtype=compute, device=g.device)             # the kernel zero-fills it
        kernel("max_pool2d_backward", g)(packed_buffer(gc), packed_buffer(idx), packed_buffer(out),
                                         (n * c, h, w) + tuple(geom))
        if ctx._recording:
            ctx.save_for_backward(idx)
        return cast(out, g.dtype)

    @staticmethod
    def backward(ctx, gg):
        (idx,) = ctx.saved_tensors
        n, c, oh, ow = idx.shape
        return gg.reshape(n, c, -1).gather(2, idx.reshape(n, c, -1)).reshape(n, c, oh, ow), None, None, None


# ----------------------------------------------------------------------------- public ops
def _batched(op, x, spatial=2):
    if x.ndim == spatial + 2:
        return x, False
    if x.ndim == spatial + 1:
        return x.unsqueeze(0), True
    raise RuntimeError(f"{op}: expected a {spatial + 1}D (unbatched) or {spatial + 2}D (batched) input, "
                       f"got {x.ndim}D with shape {list(x.shape)}")


def _sample_geometry():
    """A 2x2 window, stride (1, 2), padding (1, 0) over 3x4 images: the channel-major samples'."""
    return (2, 2, 1, 2, 1, 0, 1, 1) + _geometry("im2col", 3, 4, (2, 2), (1, 2), (1, 0), (1, 1))  # (4, 2)


# (torch's Tensor.unfold is another op, the windows view ``views.unfold_windows``, method of this name)
@op("unfold", method=views.unfold_windows, namespace="nn.functional", samples=lambda t: [
    t.S("unfold", lambda x: im2col(x, (2, 1), padding=(0, 1)), t.rn(1, 2, 3, 2)),
    t.S("unfold-positional-unbatched", lambda x: im2col(x, 2, 1, 0, 2), t.rn(2, 5, 4)),
    t.S("channel-major", lambda x: Im2Col.apply(x, _sample_geometry(), True), t.rn(2, 2, 3, 4))])
def im2col(x, kernel_size, dilation=1, padding=0, stride=1):
    """(N, C, H, W) or (C, H, W) -> (N, C*kh*kw, L) or (C*kh*kw, L), torch.nn.functional.unfold
    (its positional order: kernel_size, dilation, padding, stride)."""
    k, d, p, s = (_pair(v, n) for v, n in ((kernel_size, "kernel_size"), (dilation, "dilation"),
                                           (padding, "padding"), (stride, "stride")))
    x, unbatched = _batched("unfold", x)
    oh, ow = _geometry("im2col", x.shape[2], x.shape[3], k, s, p, d)
    out = Im2Col.apply(x, k + s + p + d + (oh, ow))
    return out.squeeze(0) if unbatched else out


@op("fold", method=False, namespace="nn.functional", samples=lambda t: [
    t.S("fold", lambda c: col2im(c, (3, 3), 2, padding=1, stride=2), t.rn(1, 8, 4)),
    t.S("fold-positional-unbatched", lambda c: col2im(c, (5, 4), 2, 1, 0, 2), t.rn(8, 4)),
    t.S("channel-major", lambda c: Col2Im.apply(c, (2, 2, 3, 4), _sample_geometry(), True), t.rn(8, 16))])
def col2im(cols, output_size, kernel_size, dilation=1, padding=0, stride=1):
    """(N, C*kh*kw, L) or (C*kh*kw, L) -> (N, C, H, W) or (C, H, W), summing overlaps,
    torch.nn.functional.fold (its positional order: output_size, kernel_size, dilation, padding, stride)."""
    k, d, p, s = (_pair(v, n) for v, n in ((kernel_size, "kernel_size"), (dilation, "dilation"),
                                           (padding, "padding"), (stride, "stride")))
    h, w = _pair(output_size, "output_size")
    cols, unbatched = _batched("fold", cols, spatial=1)
    if cols.shape[1] % (k[0] * k[1]):
        raise RuntimeError(f"fold: expected (N, C*{k[0]}*{k[1]}, L) columns, got {list(cols.shape)}")
    oh, ow = _geometry("col2im", h, w, k, s, p, d)
    n, c = cols.shape[0], cols.shape[1] // (k[0] * k[1])
    out = Col2Im.apply(cols, (n, c, h, w), k + s + p + d + (oh, ow))
    return out.squeeze(0) if unbatched else out


def _conv_inputs(name, input, weight, bias):
    """Shared checks of conv2d and conv_transpose2d: devices, a 4D weight, one dtype; a batched input."""
    check_devices(name, input, weight, *([bias] if bias is not None else []))
    x, unbatched = _batched(name, input)
    if weight.ndim != 4:
        raise RuntimeError(f"{name}: expected a 4D weight, got {weight.ndim}D")
    if x.dtype is not weight.dtype or (bias is not None and bias.dtype is not x.dtype):
        raise RuntimeError(f"{name}: input ({x.dtype.name}) and weight/bias must have the same dtype")
    return x, unbatched


def _conv2d_samples(t):
    w = t.rn(2, 1, 2, 2)
    return [
        t.S("conv2d", lambda x, w, b: conv2d(x, w, b, stride=(2, 1), padding=1), t.rn(1, 2, 4, 3), t.rn(2, 2, 2, 2),
            t.rn(2)),
        t.S("conv2d-groups-dilation", lambda x, w: conv2d(x, w, padding=(1, 0), dilation=(2, 1), groups=2),
            t.NC(t.rn(2, 2, 3, 3), "F"), t.rn(4, 1, 2, 2)),
        t.S("conv2d-input-only", lambda x: conv2d(x, t.const(w), stride=2), t.rn(1, 1, 4, 4)),
        t.S("conv2d-batch-bias", lambda x, w, b: conv2d(x, w, b), t.rn(3, 2, 3, 3), t.NC(t.rn(2, 2, 2, 2), "gap"),
            t.rn(2)),
        t.S("conv2d", lambda x, w: conv2d(x, w, padding=1, stride=2), t.rn(1, 1, 3, 3), t.rn(1, 1, 2, 2),
            second_order=True),
        t.S("conv2d-bias-groups", lambda x, w, b: conv2d(x, w, b, groups=2) ** 2, t.rn(2, 2, 3, 3),
            t.rn(2, 1, 2, 2), t.rn(2), second_order=True),
    ]


@op(method=False, samples=_conv2d_samples)
@autocast_op("conv2d")
def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    x, unbatched = _conv_inputs("conv2d", input, weight, bias)
    n, c, h, w = x.shape
    o, cg, kh, kw = weight.shape
    groups = int(groups)
    if groups < 1 or c % groups or o % groups or cg * groups != c:
        raise RuntimeError(f"conv2d: weight of shape {list(weight.shape)} with groups={groups} does not fit "
                           f"an input with {c} channels")
    if bias is not None and tuple(bias.shape) != (o,):
        raise RuntimeError(f"conv2d: bias must have shape ({o},), got {list(bias.shape)}")
    s, d = _pair(stride, "stride"), _pair(dilation, "dilation")
    if isinstance(padding, str):
        if padding == "valid":
            p = (0, 0)
        elif padding == "same":
            if s != (1, 1):
                raise RuntimeError("conv2d: padding='same' is not supported for strided convolutions")
            totals = (d[0] * (kh - 1), d[1] * (kw - 1))
            p = (totals[0] // 2, totals[1] // 2)
            extra = (totals[0] % 2, totals[1] % 2)
            if any(extra):  # odd total: PyTorch puts the extra row/column at the end
                x = _pad(x, extra)
                h, w = x.shape[2], x.shape[3]
        else:
            raise ValueError(f"conv2d: invalid padding string '{padding}', expected 'valid' or 'same'")
    else:
        p = _pair(padding, "padding")
    oh, ow = _geometry("conv2d", h, w, (kh, kw), s, p, d)
    out = Convolution.apply(x, weight, bias, (kh, kw) + s + p + d + (oh, ow), groups)
    return out.squeeze(0) if unbatched else out


def _pad(x, extra):
    return pad(x, (0, extra[1], 0, extra[0]))


@op(method=False, samples=lambda t: [
    t.S("conv1d", lambda x, w, b: conv1d(x, w, b, stride=2, padding=1), t.rn(2, 2, 5), t.rn(3, 2, 2), t.rn(3)),
    t.S("conv1d-unbatched", lambda x, w: conv1d(x, w, dilation=2), t.NC(t.rn(2, 6), "F"), t.rn(2, 2, 2))])
@autocast_op("conv1d")
def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    if input.ndim not in (2, 3):
        raise RuntimeError(f"conv1d: expected a 2D (unbatched) or 3D (batched) input, got {input.ndim}D")
    if weight.ndim != 3:
        raise RuntimeError(f"conv1d: expected a 3D weight, got {weight.ndim}D")
    one = lambda v: v[0] if isinstance(v, (list, tuple)) else v  # noqa: E731
    pad = padding if isinstance(padding, str) else (0, one(padding))
    out = conv2d(input.unsqueeze(-2), weight.unsqueeze(-2), bias, (1, one(stride)), pad, (1, one(dilation)),
                 groups)
    return out.squeeze(-2)


@op(method=False, samples=lambda t: [
    t.S("conv_transpose2d", lambda x, w, b: conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1),
        t.rn(1, 2, 2, 2), t.rn(2, 1, 3, 2), t.rn(1))])
@autocast_op("conv_transpose2d")
def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    x, unbatched = _conv_inputs("conv_transpose2d", input, weight, bias)
    n, c, h, w = x.shape
    ci, og, kh, kw = weight.shape
    groups = int(groups)
    if groups < 1 or ci != c or c % groups:
        raise RuntimeError(f"conv_transpose2d: weight of shape {list(weight.shape)} with groups={groups} does "
                           f"not fit an input with {c} channels")
    o = og * groups
    if bias is not None and tuple(bias.shape) != (o,):
        raise RuntimeError(f"conv_transpose2d: bias must have shape ({o},), got {list(bias.shape)}")
    s, p, d, op_ = (_pair(v, nm) for v, nm in ((stride, "stride"), (padding, "padding"), (dilation, "dilation"),
                                                (output_padding, "output_padding")))
    if min(s) < 1 or min(d) < 1 or min(p) < 0 or min(op_) < 0:
        raise RuntimeError("conv_transpose2d: stride and dilation must be >= 1, padding >= 0")
    if op_[0] >= max(s[0], d[0]) or op_[1] >= max(s[1], d[1]):
        raise RuntimeError(f"conv_transpose2d: output_padding {op_} must be smaller than stride or dilation")
    oh = (h - 1) * s[0] - 2 * p[0] + d[0] * (kh - 1) + op_[0] + 1
    ow = (w - 1) * s[1] - 2 * p[1] + d[1] * (kw - 1) + op_[1] + 1
    if oh <= 0 or ow <= 0:
        raise RuntimeError(f"conv_transpose2d: output size would be ({oh}, {ow})")
    cg = c // groups
    xs = x.reshape(n, groups, cg, h * w)
    wt = weight.reshape(groups, cg, og * kh * kw).mT                        # (G, og*kh*kw, cg)
    cols = (wt @ xs).reshape(n, o * kh * kw, h * w)
    out = Col2Im.apply(cols, (n, o, oh, ow), (kh, kw) + s + p + d + (h, w))
    if bias is not None:
        out = out + bias.reshape(1, o, 1, 1)
    return out.squeeze(0) if unbatched else out


def _pool_args(op, kernel_size, stride, padding, dilation):
    k = _pair(kernel_size, "kernel_size")
    s = k if stride is None or (isinstance(stride, (list, tuple)) and len(stride) == 0) else _pair(stride, "stride")
    p, d = _pair(padding, "padding"), _pair(dilation, "dilation")
    if min(k) < 1 or min(s) < 1:
        raise RuntimeError(f"{op}: kernel_size and stride must be positive")
    if p[0] > k[0] // 2 or p[1] > k[1] // 2:
        raise RuntimeError(f"{op}: pad should be at most half of effective kernel size, but got pad={p}, "
                           f"kernel_size={k}")
    return k, s, p, d


def _max_pool2d_samples(t):
    x = t.distinct(2, 2, 4, 5)

    def first_backward(g):  # as create_graph records it (MaxPool2dGrad); linear in g
        leaf = t.const(x).requires_grad_()
        return t.vjp(max_pool2d(leaf, 2, stride=(1, 2)), leaf, g)

    return [
        t.S("max_pool2d", lambda x: max_pool2d(x, 2, stride=1, padding=1), t.distinct(1, 2, 3, 3)),
        t.S("max_pool2d-ceil-dilation", lambda x: max_pool2d(x, 2, stride=2, dilation=(1, 2), ceil_mode=True),
            t.NC(t.distinct(2, 1, 5, 4), "F")),
        t.S("max_pool2d-backward", first_backward, t.rn(2, 2, 3, 2)),
        t.S("max_pool2d", lambda x: max_pool2d(x, 2, stride=1) ** 2, t.distinct(1, 1, 3, 3), second_order=True),
        t.S("max_pool2d-3", lambda x: max_pool2d(x, 2) ** 3, t.NC(t.distinct(2, 1, 4, 4), "F"), second_order=True),
    ]


@op(method=False, samples=_max_pool2d_samples)
def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    x, unbatched = _batched("max_pool2d", input)
    k, s, p, d = _pool_args("max_pool2d", kernel_size, stride, padding, dilation)
    oh, ow = _geometry("max_pool2d", x.shape[2], x.shape[3], k, s, p, d, ceil_mode)
    out, idx = MaxPool2d.apply(x, k + s + p + d + (oh, ow))
    if unbatched:
        out, idx = out.squeeze(0), idx.squeeze(0)
    return (out, idx) if return_indices else out


def _window_counts(n, k, s, p, o, include_pad):
    """Per output position along one dim: the divisor of average pooling (as PyTorch computes it)."""
    start = np.arange(o) * s - p
    end = np.minimum(start + k, n + p)
    size = end - start
    if not include_pad:
        size = np.minimum(end, n) - np.maximum(start, 0)
    return size


@op(method=False, namespace="nn.functional", samples=lambda t: [
    t.S("avg_pool2d", lambda x: avg_pool2d(x, 2, stride=1, padding=1), t.rn(1, 2, 3, 3))])
@autocast_op("avg_pool2d")
def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    x, unbatched = _batched("avg_pool2d", input)
    k, s, p, d = _pool_args("avg_pool2d", kernel_size, stride, padding, 1)
    n, c, h, w = x.shape
    oh, ow = _geometry("avg_pool2d", h, w, k, s, p, d, ceil_mode)
    cols = Im2Col.apply(x.reshape(n * c, 1, h, w), k + s + p + d + (oh, ow))   # (N*C, kh*kw, L)
    total = cols.sum(1).reshape(n, c, oh, ow)
    if divisor_override:
        counts = np.array(divisor_override)
    else:
        counts = np.outer(_window_counts(h, k[0], s[0], p[0], oh, count_include_pad),
                          _window_counts(w, k[1], s[1], p[1], ow, count_include_pad))
    if x.dtype.is_floating_point:
        out = total / tensor(counts, dtype=x.dtype, device=x.device)
    else:  # PyTorch divides an integer sum by the count, truncating
        out = div(total, tensor(counts, device=x.device), rounding_mode="trunc").to(x.dtype)
    return out.squeeze(0) if unbatched else out


def _adaptive_matrix(n, o):
    m = np.zeros((o, n))
    for i in range(o):
        a, b = (i * n) // o, -(-((i + 1) * n) // o)
        m[i, a:b] = 1.0 / (b - a)
    return m


@op(method=False, namespace="nn.functional", samples=lambda t: [
    t.S("adaptive_avg_pool2d", lambda x: adaptive_avg_pool2d(x, (2, 3)), t.rn(1, 2, 5, 4)),
    t.S("adaptive_avg_pool2d-unbatched", lambda x: adaptive_avg_pool2d(x, 2), t.NC(t.rn(1, 3, 3), "gap"))])
@autocast_op("adaptive_avg_pool2d")
def adaptive_avg_pool2d(input, output_size):
    x, unbatched = _batched("adaptive_avg_pool2d", input)
    if not x.dtype.is_floating_point:  # (the averaging matrices below would truncate to zeros)
        raise NotImplementedError(f"adaptive_avg_pool2d: not implemented for {x.dtype.name} input (as in PyTorch)")
    h, w = x.shape[2], x.shape[3]
    if isinstance(output_size, int):
        output_size = (output_size, output_size)
    oh = h if output_size[0] is None else int(output_size[0])
    ow = w if output_size[1] is None else int(output_size[1])
    if oh <= 0 or ow <= 0 or h == 0 or w == 0:
        raise RuntimeError(f"adaptive_avg_pool2d: invalid output size {output_size} for input {list(x.shape)}")
    # adaptive windows are rectangles, and a mean over a rectangle is separable: Ph @ x @ Pw^T
    ph = tensor(_adaptive_matrix(h, oh), dtype=x.dtype, device=x.device)
    pw = tensor(_adaptive_matrix(w, ow).T.copy(), dtype=x.dtype, device=x.device)
    out = ph @ x @ pw
    return out.squeeze(0) if unbatched else out
