"""Lowerings of convolution and pooling in any spatial rank: Conv, ConvTranspose, MaxPool (with torch's
per-plane indices), AveragePool, adaptive pools (one constant averaging matrix, or the gathered
windows' maxima, per dim), MaxUnpool; Lp pooling lowers through the ops it is written with."""
from __future__ import annotations

import math

import numpy as np

from ..ops.conv import _adaptive_matrix
from ..ops.conv_nd import ntuple
from ..ops.pooling import _adaptive_sizes, _adaptive_windows, _unpool_size
from ..ops.registry import attach_rule
from .lowerings import _warn_fixed_sizes, composite, lowers
from .nn_lowerings import _conv

attach_rule("conv3d", "onnx", _conv)
composite("lp_pool1d", "lp_pool2d", "lp_pool3d")


def _batched(L, x, spatial):
    """x's value with a batch dim, and whether the result must drop it again."""
    if x.ndim == spatial + 1:
        return L.op("Unsqueeze", L.value(x), L.ints([0])), True
    return L.value(x), False


def _unbatched(L, names, squeeze):
    if not squeeze:
        return names
    if isinstance(names, tuple):
        return tuple(L.op("Squeeze", n, L.ints([0])) for n in names)
    return L.op("Squeeze", names, L.ints([0]))


@lowers("conv_transpose1d", "conv_transpose2d", "conv_transpose3d")
def _conv_transpose(L, input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    n = weight.ndim - 2
    x, squeeze = _batched(L, input, n)
    pads = list(ntuple(padding, n, "padding"))
    out = L.op("ConvTranspose", x, L.value(weight), None if bias is None else L.value(bias),
               strides=list(ntuple(stride, n, "stride")), pads=pads + pads, group=int(groups),
               output_padding=list(ntuple(output_padding, n, "output_padding")),
               dilations=list(ntuple(dilation, n, "dilation")))
    return _unbatched(L, out, squeeze)


def _window(n, kernel_size, stride, padding):
    """A pooling window's ONNX attributes (torch's stride defaults to the kernel size)."""
    k = ntuple(kernel_size, n, "kernel_size")
    s = k if stride is None or (isinstance(stride, (list, tuple)) and not stride) else ntuple(stride, n, "stride")
    pads = list(ntuple(padding, n, "padding"))
    return dict(kernel_shape=list(k), strides=list(s), pads=pads + pads)


def _max_pool(n):
    def rule(L, input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
        x, squeeze = _batched(L, input, n)
        attributes = dict(dilations=list(ntuple(dilation, n, "dilation")), ceil_mode=int(ceil_mode),
                          **_window(n, kernel_size, stride, padding))
        if not return_indices:
            return _unbatched(L, L.op("MaxPool", x, **attributes), squeeze)
        values, flat = L.op("MaxPool", x, outputs=2, **attributes)
        # ONNX's indices run over the whole (N, C, *spatial) tensor, torch's over each plane
        plane = math.prod(input.shape[-n:])
        _warn_fixed_sizes(L, f"max_pool{n}d(return_indices=True)", input)
        return _unbatched(L, (values, L.op("Mod", flat, L.constant(np.array(plane, np.int64)))), squeeze)
    return rule


def _avg_pool(n):
    def rule(L, input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
             divisor_override=None):
        x, squeeze = _batched(L, input, n)
        window = _window(n, kernel_size, stride, padding)
        if divisor_override is None:
            return _unbatched(L, L.op("AveragePool", x, ceil_mode=int(ceil_mode),
                                      count_include_pad=int(count_include_pad), **window), squeeze)
        if ceil_mode:
            raise NotImplementedError(f"minidl.onnx.export: avg_pool{n}d(divisor_override=..., ceil_mode=True) "
                                      f"is not lowered")
        # without ceil_mode every window counts its whole kernel, padding included: mean * kernel / divisor
        mean = L.op("AveragePool", x, count_include_pad=1, **window)
        scale = math.prod(window["kernel_shape"]) / divisor_override
        return _unbatched(L, L.op("Mul", mean, L.constant(np.array(scale, np.dtype(input.dtype.np)))), squeeze)
    return rule


for _n in (1, 2, 3):
    attach_rule(f"max_pool{_n}d", "onnx", _max_pool(_n))
    attach_rule(f"avg_pool{_n}d", "onnx", _avg_pool(_n))


def _adaptive_avg(n):
    def rule(L, input, output_size):
        x, squeeze = _batched(L, input, n)
        sizes = tuple(input.shape[-n:])
        out = _adaptive_sizes(f"adaptive_avg_pool{n}d", sizes, output_size)
        if all(o == 1 for o in out):
            return _unbatched(L, L.op("GlobalAveragePool", x), squeeze)
        _warn_fixed_sizes(L, f"adaptive_avg_pool{n}d", input)
        dtype = np.dtype(input.dtype.np)
        for i, (size, o) in enumerate(zip(sizes, out)):   # the mean over each dim's windows: x @ M^T along it
            if size == o:
                continue
            perm = list(range(n + 2))
            perm[2 + i], perm[-1] = perm[-1], perm[2 + i]
            moved = L.op("Transpose", x, perm=perm)
            averaged = L.op("MatMul", moved, L.constant(_adaptive_matrix(size, o).T.astype(dtype)))
            x = L.op("Transpose", averaged, perm=perm)
        return _unbatched(L, x, squeeze)
    return rule


def _adaptive_max(n):
    def rule(L, input, output_size, return_indices=False):
        x, squeeze = _batched(L, input, n)
        sizes = tuple(input.shape[-n:])
        out = _adaptive_sizes(f"adaptive_max_pool{n}d", sizes, output_size)
        _warn_fixed_sizes(L, f"adaptive_max_pool{n}d", input)
        flat = None
        for i in reversed(range(n)):              # as the eager op: one dim at a time, last first
            axis = 2 + i
            positions, start = _adaptive_windows(sizes[i], out[i])
            windows = L.op("Gather", x, L.constant(positions.astype(np.int64)), axis=axis)  # (.., o, K, ..)
            x = L.op("ReduceMax", windows, L.ints([axis + 1]), keepdims=0)
            arg = L.op("ArgMax", windows, axis=axis + 1, keepdims=0, select_last_index=0)
            shape = [1] * (n + 2)
            shape[axis] = out[i]
            pos = L.op("Add", arg, L.constant(start.reshape(shape).astype(np.int64)))
            stride = L.constant(np.array(math.prod(sizes[i + 1:]), np.int64))
            scaled = L.op("Mul", pos, stride)
            flat = scaled if flat is None else L.op("Add", scaled, L.op("GatherElements", flat, pos, axis=axis))
        return _unbatched(L, (x, flat) if return_indices else x, squeeze)
    return rule


def _max_unpool(n):
    def rule(L, input, indices, kernel_size, stride=None, padding=0, output_size=None):
        x, squeeze = _batched(L, input, n)
        idx, _ = _batched(L, indices, n)
        size = _unpool_size(f"max_unpool{n}d", input, n, kernel_size, stride, padding, output_size)
        lead = (1,) + tuple(input.shape[:1]) if squeeze else tuple(input.shape[:2])
        _warn_fixed_sizes(L, f"max_unpool{n}d", input)
        # torch's indices run over each plane, ONNX's over the whole output: add each plane's offset
        offsets = (np.arange(math.prod(lead), dtype=np.int64) * math.prod(size)).reshape(lead + (1,) * n)
        flat = L.op("Add", idx, L.constant(offsets))
        out = L.op("MaxUnpool", x, flat, L.ints(lead + size), kernel_shape=list(ntuple(kernel_size, n, "k")),
                   **{k: v for k, v in _window(n, kernel_size, stride, padding).items() if k != "kernel_shape"})
        return _unbatched(L, out, squeeze)
    return rule


for _n in (1, 2, 3):
    attach_rule(f"adaptive_avg_pool{_n}d", "onnx", _adaptive_avg(_n))
    attach_rule(f"adaptive_max_pool{_n}d", "onnx", _adaptive_max(_n))
    attach_rule(f"max_unpool{_n}d", "onnx", _max_unpool(_n))
