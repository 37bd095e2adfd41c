"""conv3d, conv_transpose1d and conv_transpose3d, expressed as 2-D work on the existing primitives.

The depth taps are gathered into channels: conv3d is the 1-D im2col of the depth axis (kernel (kd, 1)
over a (D, H*W) image, zero padding included) followed by one conv2d over the (H, W) planes with the
weight's (C/G, kd) folded into its input channels. conv_transpose3d is its adjoint: one
conv_transpose2d whose output channels carry the depth taps, then the depth col2im that sums each
tap into its output slice. No 3-D kernels: both devices run the 2-D ones.
"""
from __future__ import annotations

from .autocast_mode import autocast_op
from .conv import Col2Im, Im2Col, _batched, conv2d, conv_transpose2d, output_sizes
from .core import check_devices
from .registry import op
from .shape_ops import pad


def ntuple(v, n, name):
    """``v`` (an int, or a sequence of 1 or n ints) as a tuple of n ints; ``name`` names it in the error."""
    if isinstance(v, (list, tuple)):
        if len(v) == 1:
            v = tuple(v) * n
        if len(v) != n:
            raise RuntimeError(f"{name} must either be a single int, or a tuple of {n} ints, got {list(v)}")
        return tuple(int(i) for i in v)
    return (int(v),) * n


def _inputs(name, input, weight, bias, spatial):
    """Shared checks: devices, the weight's rank, one dtype; a batched input."""
    check_devices(name, input, weight, *([bias] if bias is not None else []))
    if input.ndim not in (spatial + 1, spatial + 2):
        raise RuntimeError(f"Expected {spatial + 1}D (unbatched) or {spatial + 2}D (batched) input to {name}, "
                           f"but got input of size: {list(input.shape)}")
    if weight.ndim != spatial + 2:
        raise RuntimeError(f"{name}: expected a {spatial + 2}D weight, got {weight.ndim}D")
    if input.dtype is not weight.dtype or (bias is not None and bias.dtype is not input.dtype):
        raise RuntimeError(f"{name}: input ({input.dtype.name}), weight ({weight.dtype.name}) and bias must have "
                           f"the same dtype")
    return _batched(name, input, spatial)


def _same_padding(name, x, kernel, stride, dilation):
    """padding='same' as torch: d*(k-1) split in half, an odd extra row at the end (padded here)."""
    if any(s != 1 for s in stride):
        raise RuntimeError("padding='same' is not supported for strided convolutions")
    totals = [d * (k - 1) for k, d in zip(kernel, dilation)]
    extra = []
    for t in reversed(totals):
        extra += [0, t % 2]
    if any(extra):
        x = pad(x, extra)
    return x, tuple(t // 2 for t in totals)


def _conv3d_samples(t):
    return [
        t.S("conv3d", lambda x, w, b: conv3d(x, w, b, stride=(2, 1, 1), padding=1), t.rn(1, 2, 4, 3, 3),
            t.rn(2, 2, 2, 2, 2), t.rn(2)),
        t.S("conv3d-groups-dilation-unbatched", lambda x, w: conv3d(x, w, padding=(1, 0, 1), dilation=(2, 1, 1),
                                                                    groups=2),
            t.NC(t.rn(2, 4, 3, 3), "F"), t.rn(4, 1, 2, 2, 1)),
        t.S("conv3d-same", lambda x, w: conv3d(x, w, padding="same"), t.rn(1, 1, 3, 3, 4), t.rn(2, 1, 2, 3, 2)),
        t.S("conv3d", lambda x, w: conv3d(x, w, stride=2) ** 2, t.rn(1, 1, 3, 3, 3), t.rn(1, 1, 2, 2, 2),
            second_order=True),
    ]


@op(method=False, samples=_conv3d_samples)
@autocast_op("conv3d")
def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    x, unbatched = _inputs("conv3d", input, weight, bias, 3)
    o, cg, kd, kh, kw = weight.shape
    c, groups = x.shape[1], int(groups)
    if groups < 1 or o % groups or cg * groups != c:
        raise RuntimeError(f"conv3d: weight of shape {list(weight.shape)} with groups={groups} does not fit an "
                           f"input with {c} channels")
    s, d = ntuple(stride, 3, "conv3d: stride"), ntuple(dilation, 3, "conv3d: dilation")
    if isinstance(padding, str):
        if padding not in ("valid", "same"):
            raise RuntimeError(f"Invalid padding string: '{padding}'")
        x, p = _same_padding("conv3d", x, (kd, kh, kw), s, d) if padding == "same" else (x, (0, 0, 0))
    else:
        p = ntuple(padding, 3, "conv3d: padding")
    n, _, depth, h, w = x.shape
    od, oh, ow = output_sizes("conv3d", (depth, h, w), (kd, kh, kw), s, p, d)
    taps = Im2Col.apply(x.reshape(n, c, depth, h * w), (kd, 1, s[0], 1, p[0], 0, d[0], 1, od, h * w))
    planes = taps.reshape(n, c * kd, od, h, w).permute(0, 2, 1, 3, 4).reshape(n * od, c * kd, h, w)
    out = conv2d(planes, weight.reshape(o, cg * kd, kh, kw), bias, s[1:], p[1:], d[1:], groups)
    out = out.reshape(n, od, o, oh, ow).permute(0, 2, 1, 3, 4)
    return out.squeeze(0) if unbatched else out.contiguous()


def _transpose_sizes(name, sizes, kernel, s, p, op_, d):
    if min(s) < 1 or min(d) < 1:
        raise RuntimeError(f"{name}: stride {s} and dilation {d} must be positive")
    if min(p) < 0 or min(op_) < 0:
        raise RuntimeError(f"{name}: padding {p} and output_padding {op_} must be non-negative")
    if any(a >= max(b, c) for a, b, c in zip(op_, s, d)):
        raise RuntimeError(f"{name}: output padding must be smaller than either stride or dilation, but got "
                           f"output_padding {op_}, stride {s}, dilation {d}")
    out = tuple((n - 1) * ss - 2 * pp + dd * (k - 1) + oo + 1 for n, k, ss, pp, oo, dd in zip(sizes, kernel, s, p,
                                                                                                 op_, d))
    if min(out) <= 0:
        raise RuntimeError(f"{name}: input of spatial size {tuple(sizes)} gives an output size {out}, too small")
    return out


def _transpose_groups(name, channels, weight, groups):
    """groups, checked against a transposed convolution's weight (C_in, C_out/groups, *kernel)."""
    groups = int(groups)
    if groups < 1 or weight.shape[0] != channels or channels % groups:
        raise RuntimeError(f"{name}: weight of shape {list(weight.shape)} with groups={groups} does not fit an "
                           f"input with {channels} channels")
    return groups


@op(method=False, samples=lambda t: [
    t.S("conv_transpose1d", lambda x, w, b: conv_transpose1d(x, w, b, stride=2, padding=1, output_padding=1),
        t.rn(2, 2, 3), t.rn(2, 3, 3), t.rn(3)),
    t.S("conv_transpose1d-groups-unbatched", lambda x, w: conv_transpose1d(x, w, groups=2, dilation=2),
        t.NC(t.rn(4, 3), "F"), t.rn(4, 1, 2))])
@autocast_op("conv_transpose1d")
def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    x, unbatched = _inputs("conv_transpose1d", input, weight, bias, 1)
    groups = _transpose_groups("conv_transpose1d", x.shape[1], weight, groups)
    named = (("stride", stride), ("padding", padding), ("output_padding", output_padding), ("dilation", dilation))
    one = [ntuple(v, 1, f"conv_transpose1d: {nm}")[0] for nm, v in named]
    out = conv_transpose2d(x.unsqueeze(2), weight.unsqueeze(2), bias, (1, one[0]), (0, one[1]), (0, one[2]),
                           groups, (1, one[3])).squeeze(2)
    return out.squeeze(0) if unbatched else out


def _conv_transpose3d_samples(t):
    return [
        t.S("conv_transpose3d", lambda x, w, b: conv_transpose3d(x, w, b, stride=2, padding=(1, 0, 1),
                                                                 output_padding=(1, 0, 1)),
            t.rn(1, 2, 2, 2, 2), t.rn(2, 1, 3, 2, 2), t.rn(1)),
        t.S("conv_transpose3d-groups-dilation-unbatched",
            lambda x, w: conv_transpose3d(x, w, stride=(1, 2, 1), groups=2, dilation=(2, 1, 1)),
            t.NC(t.rn(4, 2, 2, 3), "F"), t.rn(4, 1, 2, 2, 1)),
        t.S("conv_transpose3d", lambda x, w: conv_transpose3d(x, w, stride=2) ** 2, t.rn(1, 1, 2, 2, 2),
            t.rn(1, 1, 2, 2, 2), second_order=True),
    ]


@op(method=False, samples=_conv_transpose3d_samples)
@autocast_op("conv_transpose3d")
def conv_transpose3d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    x, unbatched = _inputs("conv_transpose3d", input, weight, bias, 3)
    n, c, depth, h, w = x.shape
    ci, og, kd, kh, kw = weight.shape
    groups = _transpose_groups("conv_transpose3d", c, weight, groups)
    named = (("stride", stride), ("padding", padding), ("output_padding", output_padding), ("dilation", dilation))
    s, p, op_, d = (ntuple(v, 3, f"conv_transpose3d: {nm}") for nm, v in named)
    o = og * groups
    if bias is not None and tuple(bias.shape) != (o,):
        raise RuntimeError(f"conv_transpose3d: bias must have shape ({o},), got {list(bias.shape)}")
    od, oh, ow = _transpose_sizes("conv_transpose3d", (depth, h, w), (kd, kh, kw), s, p, op_, d)
    planes = x.permute(0, 2, 1, 3, 4).reshape(n * depth, c, h, w)
    y = conv_transpose2d(planes, weight.reshape(ci, og * kd, kh, kw), None, s[1:], p[1:], op_[1:], groups, d[1:])
    cols = y.reshape(n, depth, o * kd, oh * ow).permute(0, 2, 1, 3).reshape(n, o * kd, depth * oh * ow)
    out = Col2Im.apply(cols, (n, o, od, oh * ow), (kd, 1, s[0], 1, p[0], 0, d[0], 1, depth, oh * ow))
    out = out.reshape(n, o, od, oh, ow)
    if bias is not None:
        out = out + bias.reshape(1, o, 1, 1, 1)
    return out.squeeze(0) if unbatched else out
