"""Resampling: interpolate (nearest, nearest-exact, linear, bilinear, bicubic, trilinear, area, antialiased,
lanczos), grid_sample / affine_grid, pixel (un)shuffle and channel shuffle, each with PyTorch's index rules.

interpolate is separable: along each spatial axis the output is a fixed matrix of weights (built here from
the sizes alone, on the host) times the input, applied with matmul, or for the nearest modes a gather of
source indices (index_select, which keeps integer inputs exact). Their gradients are autograd's: the
transposed weights, the scattered indices. grid_sample's taps depend on the grid's values, so they are
computed as tensors: one gather of every tap's flat index, then a weighted sum whose weights carry the
grid's gradient.
"""
from __future__ import annotations

import math
import numbers
import warnings

import numpy as np

from .. import _dtype as dt
from .autocast_mode import autocast_op
from .conv import _adaptive_matrix
from .creation import linspace, ones, tensor
from .elementwise import where
from .indexing import gather, index_select
from .registry import op
from .shape_ops import cat

INTERPOLATING = ("linear", "bilinear", "bicubic", "trilinear", "lanczos")
MODE_RANK = {"linear": 1, "bilinear": 2, "bicubic": 2, "trilinear": 3, "lanczos": 2}   # the spatial dims each needs
CUBIC_A = -0.75          # the cubic convolution's parameter of upsample_bicubic2d and grid_sample
AA_CUBIC_A = -0.5        # ... and of the antialiased bicubic (PIL's)
LANCZOS_A = 3            # the lobes of torch's lanczos window
MODES_LISTED = "nearest | linear | bilinear | bicubic | trilinear | lanczos | area | nearest-exact"


# ----------------------------------------------------------------------------- per-axis weights
def _scale(n_in, n_out, align_corners, scale):
    """Source step per output step (aten's area_pixel_compute_scale)."""
    if align_corners:
        return (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
    return 1.0 / scale if scale is not None and scale > 0 else n_in / n_out


def _source(n_in, n_out, align_corners, scale, cubic=False):
    """Every output position's real source coordinate (clamped at 0 except for cubic, as aten's)."""
    step, i = _scale(n_in, n_out, align_corners, scale), np.arange(n_out, dtype=np.float64)
    if align_corners:
        return step * i
    src = step * (i + 0.5) - 0.5
    return src if cubic else np.maximum(src, 0.0)


def _nearest_index(n_in, n_out, scale, exact):
    """Source index per output position, in float32 arithmetic as aten's nearest_idx (floor) and
    nearest_exact_idx (round half up)."""
    i = np.arange(n_out)
    if not exact and n_out == n_in:
        return i
    if not exact and n_out == 2 * n_in:
        return i >> 1
    step = np.float32(1.0 / scale) if scale is not None and scale > 0 else np.float32(n_in) / np.float32(n_out)
    pos = np.float32((i + 0.5) * np.float64(step)) if exact else i.astype(np.float32) * step
    return np.minimum(np.floor(pos).astype(np.int64), n_in - 1)


def _linear_matrix(n_in, n_out, align_corners, scale):
    m = np.zeros((n_out, n_in))
    if n_in == n_out:            # (aten copies then, whatever the scale)
        return np.eye(n_in)
    src = _source(n_in, n_out, align_corners, scale)
    i0 = np.minimum(np.floor(src).astype(np.int64), n_in - 1)
    w1 = np.clip(src - i0, 0.0, 1.0)
    i1 = i0 + (i0 < n_in - 1)
    rows = np.arange(n_out)
    np.add.at(m, (rows, i0), 1.0 - w1)
    np.add.at(m, (rows, i1), w1)
    return m


def cubic_coefficients(t, a=CUBIC_A):
    """The four cubic-convolution weights of the taps at -1, 0, 1, 2 for a fraction t (numpy array or
    Tensor: the same arithmetic serves both)."""
    def near(x):   # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x):    # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return far(t + 1), near(t), near(1 - t), far(2 - t)


def _cubic_matrix(n_in, n_out, align_corners, scale):
    src = _source(n_in, n_out, align_corners, scale, cubic=True)
    i0 = np.minimum(np.floor(src).astype(np.int64), n_in - 1)
    t = np.clip(src - i0, 0.0, 1.0)
    m, rows = np.zeros((n_out, n_in)), np.arange(n_out)
    for k, w in enumerate(cubic_coefficients(t)):
        np.add.at(m, (rows, np.clip(i0 - 1 + k, 0, n_in - 1)), w)   # (border taps repeat the edge)
    return m


def _aa_filter(mode):
    if mode == "bilinear":
        return 1.0, lambda x: np.maximum(0.0, 1.0 - np.abs(x))
    if mode == "lanczos":
        return LANCZOS_A, lambda x: np.where(np.abs(x) < LANCZOS_A, np.sinc(x) * np.sinc(x / LANCZOS_A), 0.0)
    a = AA_CUBIC_A

    def cubic(x):
        x = np.abs(x)
        return np.where(x < 1, ((a + 2) * x - (a + 3)) * x * x + 1,
                        np.where(x < 2, (((x - 5) * x + 8) * x - 4) * a, 0.0))
    return 2.0, cubic


def _antialiased_matrix(n_in, n_out, align_corners, scale, mode):
    """Each output's weights over the input positions its widened filter covers (aten's
    _compute_indices_min_size_weights_aa): a low-pass of the source when downsampling."""
    if n_in == n_out:            # (aten leaves an axis of unchanged size alone)
        return np.eye(n_in)
    support, kernel = _aa_filter(mode)
    step = _scale(n_in, n_out, align_corners, scale)
    if step >= 1.0:
        support, inv = support * step, 1.0 / step
    else:
        inv = 1.0
    m = np.zeros((n_out, n_in))
    for i in range(n_out):    # (one row per output position: a Python loop over sizes, not elements)
        center = step * (i + 0.5)
        lo = max(int(center - support + 0.5), 0)
        hi = min(int(center + support + 0.5), n_in)
        w = kernel((np.arange(lo, hi) - center + 0.5) * inv)
        total = w.sum()
        m[i, lo:hi] = w / total if total != 0 else w
    return m


def _axis_matrix(mode, n_in, n_out, align_corners, scale, antialias):
    if mode == "area":
        return _adaptive_matrix(n_in, n_out)
    if antialias:
        return _antialiased_matrix(n_in, n_out, align_corners, scale, mode)
    if mode == "bicubic":
        return _cubic_matrix(n_in, n_out, align_corners, scale)
    return _linear_matrix(n_in, n_out, align_corners, scale)


# ----------------------------------------------------------------------------- interpolate
def _spatial_list(value, dim, what, input):
    if not isinstance(value, (list, tuple)):
        return [value] * dim
    if len(value) != dim:
        shown = "output size of" if what == "size" else "scale_factor of shape"
        fmt = "output size in (o1, o2, ...,oK)" if what == "size" else "scale_factor in (s1, s2, ...,sK)"
        raise ValueError(f"Input and {'output' if what == 'size' else 'scale_factor'} must have the same number of "
                         f"spatial dimensions, but got input with spatial dimensions of {list(input.shape[2:])} "
                         f"and {shown} {value}. Please provide input tensor in (N, C, d1, d2, ...,dK) format and "
                         f"{fmt} format.")
    return list(value)


def _check_mode(input, mode, align_corners, antialias):
    """torch's refusals of a mode, in its order (after align_corners' and the sizes')."""
    if antialias and not (mode in ("bilinear", "bicubic", "lanczos") and input.ndim == 4):
        raise ValueError("Anti-alias option is restricted to bilinear, bicubic, and lanczos modes and requires a "
                         "4-D tensor as input")
    need = MODE_RANK.get(mode)
    if input.ndim not in (3, 4, 5) or mode not in INTERPOLATING + ("nearest", "area", "nearest-exact") or (
            mode == "lanczos" and input.ndim != 4):
        raise NotImplementedError(f"Input Error: Only 3D, 4D and 5D input Tensors supported (got {input.ndim}D) "
                                  f"for the modes: {MODES_LISTED} (got {mode})")
    if need is not None and need != input.ndim - 2:
        raise NotImplementedError(f"Got {input.ndim}D input, but {mode} mode needs {need + 2}D input")
    if mode == "lanczos" and align_corners:
        raise ValueError("Lanczos mode does not support align_corners=True")
    if mode == "lanczos" and not antialias:
        raise ValueError("Lanczos mode requires antialias=True")


def _check_dtype(input, mode):
    ok = input.dtype.is_floating_point or (input.dtype is dt.uint8 and mode in
                                           ("nearest", "nearest-exact", "bilinear", "bicubic", "lanczos"))
    if not ok:
        raise NotImplementedError(f"interpolate(mode={mode!r}): not implemented for {input.dtype.name} input "
                                  f"(as in PyTorch)")


def output_geometry(input, size, scale_factor, mode, recompute_scale_factor):
    """(output sizes, scales passed on to the index rules: None where the size was given or recomputed)."""
    dim = input.ndim - 2
    if size is not None and scale_factor is not None:
        raise ValueError("only one of size or scale_factor should be defined")
    if size is not None:
        if recompute_scale_factor:
            raise ValueError("recompute_scale_factor is not meaningful with an explicit size.")
        sizes = _spatial_list(size, dim, "size", input)
        if not all(isinstance(s, numbers.Integral) for s in sizes):
            raise TypeError(f"expected size to be one of int or Tuple[int] or Tuple[int, int] or "
                            f"Tuple[int, int, int], but got size with types {[type(s) for s in sizes]}")
        sizes, scales = [int(s) for s in sizes], [None] * dim
    elif scale_factor is not None:
        scales = [float(s) for s in _spatial_list(scale_factor, dim, "scale_factor", input)]
        sizes = [int(math.floor(n * s)) for n, s in zip(input.shape[2:], scales)]
        if recompute_scale_factor or mode == "area":
            scales = [None] * dim
    else:
        raise ValueError("either size or scale_factor should be defined")
    return sizes, scales


def _resample_axis(x, axis, n_out, scale, mode, align_corners, antialias):
    n_in = x.shape[axis]
    if mode in ("nearest", "nearest-exact"):
        index = _nearest_index(n_in, n_out, scale, mode == "nearest-exact")
        return index_select(x, axis, tensor(index, device=x.device))
    m = _axis_matrix(mode, n_in, n_out, align_corners, scale, antialias)
    weights = tensor(m.T.copy(), dtype=x.dtype, device=x.device)
    return (x.movedim(axis, -1) @ weights).movedim(-1, axis)


def _interpolate_samples(t):
    s = t.S
    return [s("nearest-1d", lambda x: interpolate(x, size=5), t.rn(1, 2, 3)),
            s("nearest-2d-scale", lambda x: interpolate(x, scale_factor=1.7), t.NC(t.rn(1, 2, 3, 4), "gap")),
            s("nearest-exact-3d", lambda x: interpolate(x, size=(2, 3, 5), mode="nearest-exact"),
              t.rn(1, 1, 3, 2, 4)),
            s("linear", lambda x: interpolate(x, size=7, mode="linear"), t.rn(2, 2, 4)),
            s("bilinear-corners", lambda x: interpolate(x, scale_factor=(0.6, 1.7), mode="bilinear",
                                                        align_corners=True), t.rn(1, 2, 4, 4)),
            s("bicubic", lambda x: interpolate(x, size=(5, 3), mode="bicubic"), t.rn(1, 2, 4, 4)),
            s("bicubic-aa", lambda x: interpolate(x, size=(2, 3), mode="bicubic", antialias=True),
              t.rn(1, 1, 5, 7)),
            s("bilinear-aa", lambda x: interpolate(x, scale_factor=0.5, mode="bilinear", antialias=True),
              t.rn(1, 1, 6, 5)),
            s("lanczos", lambda x: interpolate(x, size=(2, 4), mode="lanczos", antialias=True), t.rn(1, 2, 7, 3)),
            s("trilinear", lambda x: interpolate(x, size=(3, 2, 4), mode="trilinear"), t.rn(1, 1, 2, 3, 3)),
            s("area", lambda x: interpolate(x, size=(3, 2), mode="area"), t.rn(1, 2, 5, 4))]


@op(method=False, namespace="nn.functional", samples=_interpolate_samples)
@autocast_op("interpolate")
def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None, recompute_scale_factor=None,
                antialias=False):
    """Resize the spatial dims of (N, C, d1[, d2[, d3]]) by one of torch's modes, axis by axis."""
    if mode in ("nearest", "area", "nearest-exact") and align_corners is not None:
        raise ValueError("align_corners option can only be set with the interpolating modes: "
                         "linear | bilinear | bicubic | trilinear")
    sizes, scales = output_geometry(input, size, scale_factor, mode, recompute_scale_factor)
    _check_mode(input, mode, align_corners, antialias)
    _check_dtype(input, mode)
    if min(sizes) <= 0 or min(input.shape[2:]) <= 0:
        raise RuntimeError(f"interpolate: input and output sizes should be greater than 0, but got input "
                           f"{list(input.shape[2:])} and output {sizes}")
    if mode in INTERPOLATING and align_corners is None:
        align_corners = False
    if input.dtype is dt.uint8 and mode not in ("nearest", "nearest-exact"):
        return _resample_uint8(input, sizes, scales, mode, align_corners, antialias)
    x = input
    for axis, (n_out, scale) in enumerate(zip(sizes, scales)):
        x = _resample_axis(x, axis + 2, n_out, scale, mode, align_corners, antialias)
    return x


def _fixed_point(m):
    """Weights as aten's uint8 kernels hold them: int16 with as many fraction bits (up to 22) as fit."""
    bits = 0
    while bits < 22 and int(0.5 + np.abs(m).max() * (1 << (bits + 1))) < (1 << 15):
        bits += 1
    return np.trunc(m * (1 << bits) + np.where(m < 0, -0.5, 0.5)), bits


def _resample_uint8(input, sizes, scales, mode, align_corners, antialias):
    """uint8 bilinear/bicubic as aten computes it: integer weights, the last axis first, each pass rounded
    back to uint8 (sums of products stay exact in float64)."""
    x = input
    for axis in reversed(range(len(sizes))):
        n_in = x.shape[axis + 2]
        if n_in == sizes[axis]:
            continue
        m, bits = _fixed_point(_axis_matrix(mode, n_in, sizes[axis], align_corners, scales[axis], antialias))
        weights = tensor(m.T.copy(), dtype=dt.float64, device=x.device)
        acc = x.to(dt.float64).movedim(axis + 2, -1) @ weights + (1 << (bits - 1))
        x = (acc / (1 << bits)).floor().clamp(0, 255).to(dt.uint8).movedim(-1, axis + 2)
    return x


# ----------------------------------------------------------------------------- grid_sample
GRID_MODES = ("bilinear", "nearest", "bicubic")
PADDING_MODES = ("zeros", "border", "reflection")


def _unnormalize(coord, size, align_corners):
    """[-1, 1] grid coordinates to pixel coordinates (corner pixels' centres, or their outer edges)."""
    if align_corners:
        return (coord + 1) * ((size - 1) / 2)
    return ((coord + 1) * size - 1) / 2


def _reflect(coord, twice_low, twice_high):
    """coord mirrored into [twice_low / 2, twice_high / 2] as often as it takes."""
    if twice_low == twice_high:
        return coord * 0
    low, span = twice_low / 2, (twice_high - twice_low) / 2
    dist = (coord - low).abs()
    extra, flips = dist.fmod(span), (dist / span).floor()
    return where(flips.fmod(2) == 0, extra + low, span - extra + low)


def _clip(coord, size):
    """coord clamped into [0, size - 1], with no gradient at a bound or beyond it (aten's
    clip_coordinates_set_grad: a grid point exactly on the edge, as affine_grid's with align_corners, included)."""
    inside = (coord > 0) & (coord < size - 1)
    return where(inside, coord, coord.detach().clamp(0, size - 1))


def _pad_coordinate(coord, size, padding_mode, align_corners):
    """The coordinate a padding mode reads instead (zeros: unchanged; outside taps then read zero)."""
    if padding_mode == "border":
        return _clip(coord, size)
    if padding_mode == "reflection":
        twice = (0, 2 * (size - 1)) if align_corners else (-1, 2 * size - 1)
        return _clip(_reflect(coord, *twice), size)
    return coord


def _check_grid_sample(input, grid, mode, padding_mode):
    if mode not in GRID_MODES:
        raise ValueError(f"nn.functional.grid_sample(): expected mode to be 'bilinear', 'nearest' or 'bicubic', "
                         f"but got: '{mode}'")
    if padding_mode not in PADDING_MODES:
        raise ValueError(f"nn.functional.grid_sample(): expected padding_mode to be 'zeros', 'border', or "
                         f"'reflection', but got: '{padding_mode}'")
    if input.ndim not in (4, 5) or grid.ndim != input.ndim:
        raise RuntimeError(f"grid_sampler(): expected 4D or 5D input and grid with same number of dimensions, but "
                           f"got input with sizes {list(input.shape)} and grid with sizes {list(grid.shape)}")
    if grid.shape[0] != input.shape[0]:
        raise RuntimeError(f"grid_sampler(): expected grid and input to have same batch size, but got input with "
                           f"sizes {list(input.shape)} and grid with sizes {list(grid.shape)}")
    if grid.shape[-1] != input.ndim - 2:
        raise RuntimeError(f"grid_sampler(): expected grid to have size {input.ndim - 2} in last dimension, but got "
                           f"grid with sizes {list(grid.shape)}")
    if input.dtype is not grid.dtype or not input.dtype.is_floating_point:
        raise RuntimeError(f"grid_sampler(): expected input and grid to have the same floating-point dtype, but "
                           f"input has {input.dtype.name} and grid has {grid.dtype.name}")
    if mode == "bicubic" and input.ndim != 4:
        raise RuntimeError("grid_sampler(): bicubic interpolation only supports 4D input")
    if any(s == 0 for s in input.shape[2:]):
        raise RuntimeError(f"grid_sampler(): expected input to have non-empty spatial dimensions, but input has "
                           f"sizes {list(input.shape)}")


def _taps(coords, sizes, mode, padding_mode, align_corners):
    """Per tap of the interpolation: (per-axis integer coordinates as float tensors, weight tensor).
    ``coords``: per spatial axis (slowest first) the pixel coordinate of every output point."""
    if mode == "nearest":
        padded = [_pad_coordinate(c, n, padding_mode, align_corners).round() for c, n in zip(coords, sizes)]
        return [(padded, None)]
    if mode == "bilinear":
        padded = [_pad_coordinate(c, n, padding_mode, align_corners) for c, n in zip(coords, sizes)]
        per_axis = []
        for c in padded:
            lo = c.floor()
            per_axis.append([(lo, lo + 1 - c), (lo + 1, c - lo)])
        taps = [([], None)]
        for options in per_axis:
            taps = [(idx + [i], w if w0 is None else w0 * w) for idx, w0 in taps for i, w in options]
        return taps
    # bicubic: the fraction comes from the unpadded coordinate, each tap is padded on its own
    (y, x), (h, w) = coords, sizes
    y0, x0 = y.floor(), x.floor()
    wy, wx = cubic_coefficients(y - y0), cubic_coefficients(x - x0)
    return [([_pad_coordinate(y0 - 1 + i, h, padding_mode, align_corners),
              _pad_coordinate(x0 - 1 + j, w, padding_mode, align_corners)], wy[i] * wx[j])
            for i in range(4) for j in range(4)]


def _sample(input, taps, sizes, points):
    """sum over taps of weight * input at the tap (zero outside the input): (N, C, points)."""
    n, c = input.shape[:2]
    flat = input.reshape(n, c, math.prod(sizes))
    indices, weights = [], []
    for idx, w in taps:
        inside, offset = None, None
        for coord, size in zip(idx, sizes):
            ok = (coord >= 0) & (coord <= size - 1)
            inside = ok if inside is None else inside & ok
            offset = coord if offset is None else offset * size + coord
        indices.append(where(inside, offset, 0).to(dt.int64).reshape(n, 1, points))
        keep = inside.to(input.dtype)
        weights.append((keep if w is None else w * keep).reshape(n, 1, points))
    index = cat(indices, 2).expand(n, c, len(taps) * points)
    values = gather(flat, 2, index).reshape(n, c, len(taps), points)
    return (values * cat(weights, 2).reshape(n, 1, len(taps), points)).sum(2)


def _align_corners_default(align_corners):
    if align_corners is None:
        warnings.warn("Default grid_sample and affine_grid behavior has changed to align_corners=False since 1.3.0. "
                      "Please specify align_corners=True if the old behavior is desired. See the documentation of "
                      "grid_sample for details.", stacklevel=3)
        return False
    return bool(align_corners)


def _grid_sample_samples(t):
    def grid(*shape):     # uniform points, some outside the image (the kinks are a null set)
        return t.uniform(-1.3, 1.3, *shape)
    s, out = t.S, []
    for mode in GRID_MODES:
        for pad in PADDING_MODES:
            out.append(s(f"{mode}-{pad}", lambda x, g, m=mode, p=pad: grid_sample(x, g, m, p, align_corners=False),
                         t.rn(1, 2, 3, 4), grid(1, 2, 3, 2), atol=1e-4))
    out += [s("bilinear-corners-3d", lambda x, g: grid_sample(x, g, "bilinear", "reflection", align_corners=True),
              t.rn(1, 1, 2, 3, 3), grid(1, 2, 1, 2, 3), atol=1e-4),
            s("nearest-3d", lambda x, g: grid_sample(x, g, "nearest", "zeros", align_corners=True),
              t.rn(2, 1, 2, 2, 3), grid(2, 1, 2, 2, 3))]
    return out


@op(method=False, namespace="nn.functional", samples=_grid_sample_samples)
@autocast_op("grid_sample")
def grid_sample(input, grid, mode="bilinear", padding_mode="zeros", align_corners=None):
    """input (N, C, [D,] H, W) read at the normalized points of grid (N, [Do,] Ho, Wo, 2 or 3: x, y[, z])."""
    _check_grid_sample(input, grid, mode, padding_mode)
    align_corners = _align_corners_default(align_corners)
    sizes = list(input.shape[2:])
    rank = len(sizes)
    # grid's last dim lists x (width) first: reverse it to the input's axis order
    coords = [_unnormalize(grid[..., rank - 1 - a], sizes[a], align_corners) for a in range(rank)]
    out = _sample(input, _taps(coords, sizes, mode, padding_mode, align_corners), sizes, math.prod(grid.shape[1:-1]))
    return out.reshape(tuple(input.shape[:2]) + tuple(grid.shape[1:-1]))


@op(method=False, samples=lambda t: [
    t.S("bicubic-border", lambda x, g: grid_sampler_2d(x, g, 2, 1, True), t.rn(1, 2, 3, 3),
        t.uniform(-1.2, 1.2, 1, 2, 2, 2), atol=1e-4)])
def grid_sampler_2d(input, grid, interpolation_mode, padding_mode, align_corners):
    """aten's grid sampler: grid_sample's modes as integers (bilinear, nearest, bicubic; zeros, border,
    reflection)."""
    if input.ndim != 4:
        raise RuntimeError(f"grid_sampler_2d(): expected 4D input, got {input.ndim}D with shape {list(input.shape)}")
    return grid_sample(input, grid, GRID_MODES[interpolation_mode], PADDING_MODES[padding_mode], bool(align_corners))


def _base_axis(n, align_corners, like):
    """n evenly spaced normalized coordinates across a side (pixel centres unless align_corners)."""
    if n <= 1:
        return tensor([0.0] * n, dtype=like.dtype, device=like.device)
    axis = linspace(-1, 1, n, dtype=like.dtype, device=like.device)
    return axis if align_corners else axis * ((n - 1) / n)


@op(method=False, namespace="nn.functional", samples=lambda t: [
    t.S("2d", lambda th: affine_grid(th, (2, 1, 3, 4), align_corners=False), t.rn(2, 2, 3)),
    t.S("3d-corners", lambda th: affine_grid(th, (1, 2, 2, 3, 2), align_corners=True), t.rn(1, 3, 4))])
def affine_grid(theta, size, align_corners=None):
    """The sampling grid of affine maps theta (N, 2, 3) or (N, 3, 4) for grid_sample over ``size``."""
    align_corners = _align_corners_default(align_corners)
    size = tuple(int(s) for s in size)
    if not theta.dtype.is_floating_point:
        raise ValueError(f"Expected theta to have floating point type, but got {theta.dtype}")
    if len(size) not in (4, 5):
        raise NotImplementedError(f"affine_grid only supports 4D and 5D sizes, for 2D and 3D affine transforms, "
                                  f"respectively. Got size {size}.")
    rank = len(size) - 2
    if theta.ndim != 3 or tuple(theta.shape[1:]) != (rank, rank + 1) or theta.shape[0] != size[0]:
        raise ValueError(f"Expected a batch of {rank}D affine matrices of shape Nx{rank}x{rank + 1} for size "
                         f"{size}. Got {list(theta.shape)}.")
    if min(size[2:]) <= 0:
        raise ValueError(f"Expected non-zero, positive output size. Got {size}")
    spatial = size[2:]
    if align_corners and min(spatial) == 1:
        warnings.warn("Since version 1.3.0, affine_grid behavior has changed for unit-size grids when "
                      "align_corners=True. This is not an intended use case of affine_grid. See the documentation "
                      "of affine_grid for details.", stacklevel=2)
    # the base grid (*spatial, rank + 1): x (the last axis) first, then y, z, then 1
    columns = []
    for a in reversed(range(rank)):
        shape = [1] * rank
        shape[a] = spatial[a]
        columns.append(_base_axis(spatial[a], align_corners, theta).reshape(shape).expand(spatial))
    columns.append(ones(spatial, dtype=theta.dtype, device=theta.device))
    base = cat([c.unsqueeze(-1) for c in columns], -1).reshape(1, -1, rank + 1)
    return (base @ theta.transpose(1, 2)).reshape((size[0],) + spatial + (rank,))


# ----------------------------------------------------------------------------- shuffles
def _integer(name, what, value):
    """value as an int; a float or bool refused, as torch's argument parser does (int() would truncate 2.5)."""
    if isinstance(value, (bool, float)):
        raise TypeError(f"{name}(): argument '{what}' must be int, not {type(value).__name__}")
    return int(value)


def _check_factor(name, what, factor, x):
    if x.ndim < 3:
        raise RuntimeError(f"{name} expects input to have at least 3 dimensions, but got input with {x.ndim} "
                           f"dimension(s)")
    if factor <= 0:
        raise RuntimeError(f"{name} expects a positive {what}, but got {factor}")


@op(method=False, samples=lambda t: [
    t.S("pixel_shuffle", lambda x: pixel_shuffle(x, 2), t.rn(2, 8, 2, 3)),
    t.S("pixel_shuffle-batchless", lambda x: pixel_shuffle(x, 3), t.rn(9, 1, 2))])
def pixel_shuffle(input, upscale_factor):
    """(*, C r^2, H, W) -> (*, C, H r, W r): each channel block of r^2 becomes an r x r tile."""
    r = _integer("pixel_shuffle", "upscale_factor", upscale_factor)
    _check_factor("pixel_shuffle", "upscale_factor", r, input)
    *lead, c, h, w = input.shape
    if c % (r * r):
        raise RuntimeError(f"pixel_shuffle expects its input's 'channel' dimension to be divisible by the square of "
                           f"upscale_factor, but input.size(-3)={c} is not divisible by {r * r}")
    k = len(lead)
    tiles = input.reshape(*lead, c // (r * r), r, r, h, w)
    order = list(range(k)) + [k, k + 3, k + 1, k + 4, k + 2]
    return tiles.permute(*order).reshape(*lead, c // (r * r), h * r, w * r)


@op(method=False, samples=lambda t: [
    t.S("pixel_unshuffle", lambda x: pixel_unshuffle(x, 2), t.rn(2, 2, 4, 6)),
    t.S("pixel_unshuffle-batchless", lambda x: pixel_unshuffle(x, 3), t.NC(t.rn(1, 3, 3), "gap"))])
def pixel_unshuffle(input, downscale_factor):
    """pixel_shuffle's inverse: (*, C, H r, W r) -> (*, C r^2, H, W)."""
    r = _integer("pixel_unshuffle", "downscale_factor", downscale_factor)
    _check_factor("pixel_unshuffle", "downscale_factor", r, input)
    *lead, c, h, w = input.shape
    for what, n, d in (("height", h, -2), ("width", w, -1)):
        if n % r:
            raise RuntimeError(f"pixel_unshuffle expects {what} to be divisible by downscale_factor, but "
                               f"input.size({d})={n} is not divisible by {r}")
    k = len(lead)
    tiles = input.reshape(*lead, c, h // r, r, w // r, r)
    order = list(range(k)) + [k, k + 2, k + 4, k + 1, k + 3]
    return tiles.permute(*order).reshape(*lead, c * r * r, h // r, w // r)


@op(method=False, samples=lambda t: [
    t.S("channel_shuffle", lambda x: channel_shuffle(x, 3), t.rn(2, 6, 2)),
    t.S("channel_shuffle-4d", lambda x: channel_shuffle(x, 2), t.NC(t.rn(1, 4, 2, 2), "F"))])
def channel_shuffle(input, groups):
    """(N, g k, *) -> (N, k g, *): channel j of group i moves to position j g + i (ShuffleNet)."""
    if input.ndim <= 2:
        raise RuntimeError(f"channel_shuffle expects input with > 2 dims, but got input with sizes "
                           f"{list(input.shape)}")
    g = _integer("channel_shuffle", "groups", groups)
    if g <= 0:
        raise RuntimeError(f"Number of groups to divide channels in must be positive. Value of groups:{g}")
    n, c, *rest = input.shape
    if c % g:
        raise RuntimeError(f"Number of channels must be divisible by groups. Got {c} channels and {g} groups.")
    return input.reshape(n, g, c // g, *rest).transpose(1, 2).reshape(n, c, *rest)
