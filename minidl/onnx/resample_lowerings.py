"""ONNX lowerings of the resampling ops (``ops/resampling.py``): Resize per resized axis (its ``axes``
input, so the batch and channel sizes stay free), GridSample, AffineGrid. Area and antialiased interpolation
are the same per-axis weight matrices as eager, as MatMuls; the shuffles lower as the reshapes and permute
they are written with (``composite``), whose sizes follow the input's. See ``lowerings``."""
from __future__ import annotations

import numpy as np

from .. import _dtype as dt
from ..ops.resampling import (GRID_MODES, PADDING_MODES, _axis_matrix, _base_axis, _nearest_index,
                               output_geometry)
from ..ops.registry import attach_rule
from .lowerings import _np, _warn_fixed_sizes, composite, lowers

NEAREST = {"nearest": dict(coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
           "nearest-exact": dict(coordinate_transformation_mode="half_pixel", nearest_mode="round_prefer_ceil")}


def _resize_axis(L, v, axis, n_out, scale, mode, align_corners):
    """One Resize of axis ``axis`` (by the given scale as torch's index rule uses it, else to the size)."""
    if mode in NEAREST:
        attributes = dict(mode="nearest", **NEAREST[mode])
    else:
        attributes = dict(mode="cubic" if mode == "bicubic" else "linear", cubic_coeff_a=-0.75, exclude_outside=0,
                          coordinate_transformation_mode="align_corners" if align_corners else "half_pixel")
    if scale is not None and not align_corners:
        return L.op("Resize", v, "", L.constant(np.array([scale], np.float32)), axes=[axis], **attributes)
    return L.op("Resize", v, "", "", L.ints([n_out]), axes=[axis], **attributes)


def _matmul_axis(L, v, axis, ndim, matrix, dtype):
    """v's ``axis`` replaced by ``matrix`` (out, in) times it."""
    perm = list(range(ndim))
    perm[axis], perm[-1] = perm[-1], perm[axis]
    moved = L.op("Transpose", v, perm=perm)
    out = L.op("MatMul", moved, L.constant(matrix.T.astype(dtype)))
    return L.op("Transpose", out, perm=perm)


@lowers("interpolate")
def _interpolate(L, input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                 recompute_scale_factor=None, antialias=False):
    sizes, scales = output_geometry(input, size, scale_factor, mode, recompute_scale_factor)
    if input.dtype is dt.uint8 and mode not in NEAREST:
        raise NotImplementedError(f"minidl.onnx.export: interpolate(mode={mode!r}) of uint8 (aten's fixed-point "
                                  f"arithmetic) is not lowered")
    fixed = scale_factor is not None and None in scales     # (sizes recomputed from the input's)
    v = L.value(input)
    for a, (n_out, scale) in enumerate(zip(sizes, scales)):
        axis, n_in = a + 2, input.shape[a + 2]
        if mode in NEAREST:
            plan = _nearest_index(n_in, n_out, scale, mode == "nearest-exact")
            moved = n_in == n_out and not np.array_equal(plan, np.arange(n_in))
        else:
            plan = _axis_matrix(mode, n_in, n_out, bool(align_corners), scale, antialias)
            moved = n_in == n_out and not np.array_equal(plan, np.eye(n_in))
        if mode == "area" or antialias or moved:   # (no such Resize; ONNX Runtime copies an axis of unchanged size)
            fixed = True
            if n_in == n_out and not moved:
                continue
            v = (L.op("Gather", v, L.constant(plan), axis=axis) if mode in NEAREST
                 else _matmul_axis(L, v, axis, input.ndim, plan, _np(input)))
        else:
            v = _resize_axis(L, v, axis, n_out, scale, mode, bool(align_corners))
    if fixed:
        _warn_fixed_sizes(L, "interpolate", input)
    return v if v != L.value(input) else L.op("Identity", v)


def _grid_sample_node(L, input, grid, mode, padding_mode, align_corners):
    if L.opset < 20 and input.ndim != 4:
        raise NotImplementedError(f"minidl.onnx.export: grid_sample of {input.ndim}-D input needs opset 20 "
                                  f"(GridSample is 4-D before it); this export is opset {L.opset}")
    if L.opset >= 20:
        mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    return L.op("GridSample", L.value(input), L.value(grid), mode=mode, padding_mode=padding_mode,
                align_corners=int(bool(align_corners)))


@lowers("grid_sample")
def _grid_sample(L, input, grid, mode="bilinear", padding_mode="zeros", align_corners=None):
    return _grid_sample_node(L, input, grid, mode, padding_mode, align_corners)


attach_rule("grid_sampler_2d", "onnx", lambda L, input, grid, interpolation_mode, padding_mode, align_corners:
            _grid_sample_node(L, input, grid, GRID_MODES[interpolation_mode], PADDING_MODES[padding_mode],
                              align_corners))


@lowers("affine_grid")
def _affine_grid(L, theta, size, align_corners=None):
    size = [int(s) for s in size]
    if L.opset >= 20:
        return L.op("AffineGrid", L.value(theta), L.ints(size), align_corners=int(bool(align_corners)))
    # before AffineGrid: the base grid (x, y[, z], 1 per point) as a constant, times theta's transpose
    rank, spatial = len(size) - 2, size[2:]
    axes = [_base_axis(n, bool(align_corners), theta).numpy(force=True) for n in reversed(spatial)]
    grids = list(np.meshgrid(*axes[::-1], indexing="ij"))[::-1] + [np.ones(spatial)]
    base = np.stack(grids, -1).reshape(1, -1, rank + 1).astype(_np(theta))
    out = L.op("MatMul", L.constant(base), L.op("Transpose", L.value(theta), perm=[0, 2, 1]))
    return L.op("Reshape", out, L.ints([size[0]] + spatial + [rank]))


composite("pixel_shuffle", "pixel_unshuffle", "channel_shuffle")   # (a reshape, a permute, a reshape)
