"""ONNX lowerings of instance norm, local response norm and embedding_bag (ONNX's own InstanceNormalization and
LRN; the bags folded by ScatterElements) and of cosine_similarity and pdist (the p-norms of ``reduction_lowerings``);
pairwise_distance and the bilinear form go through the norm and einsum they are written with (``composite``).
See ``lowerings``."""
from __future__ import annotations

import numpy as np

from .dtypes import code
from .lowerings import _dim, _np, _operand, _warn_fixed_sizes, composite, lowers
from .reduction_lowerings import _p_norm

composite("bilinear", "pairwise_distance")


@lowers("cosine_similarity")
def _cosine_similarity(L, x1, x2, dim=1, eps=1e-8):
    dtype = _np(L.out)
    a, b = _operand(L, x1, dtype), _operand(L, x2, dtype)
    a = L.op("Expand", a, L.op("Shape", b))   # (both broadcast, as the op does first)
    b = L.op("Expand", b, L.op("Shape", a))
    axis = _dim(dim, max(x1.ndim, x2.ndim, 1))
    if max(x1.ndim, x2.ndim) == 0:
        a, b = (L.op("Reshape", v, L.ints([1])) for v in (a, b))
    eps = L.constant(np.array(eps, dtype))
    a, b = (L.op("Div", v, L.op("Max", _p_norm(L, v, 2, L.ints([axis]), 1, dtype), eps)) for v in (a, b))
    out = L.op("ReduceSum", L.op("Mul", a, b), L.ints([axis]), keepdims=0)
    return L.op("Reshape", out, L.ints([])) if L.out.ndim == 0 else out


@lowers("pdist")
def _pdist(L, input, p=2.0):
    """The rows of each pair i < j gathered (the pairs fixed by the row count seen while tracing)."""
    _warn_fixed_sizes(L, "pdist", input)
    dtype, rows = _np(L.out), input.shape[0]
    first, second = np.triu_indices(rows, 1)
    x = _operand(L, input, dtype)
    pairs = [L.op("Gather", x, L.constant(np.asarray(index, np.int64)), axis=0) for index in (first, second)]
    return _p_norm(L, L.op("Sub", *pairs), p, L.ints([1]), 0, dtype)


def _per_channel(L, t, channels, dtype, fill):
    return _operand(L, t, dtype) if t is not None else L.constant(np.full(channels, fill, dtype))


@lowers("instance_norm")
def _instance_norm(L, input, running_mean=None, running_var=None, weight=None, bias=None, use_input_stats=True,
                   momentum=0.1, eps=1e-5):
    """InstanceNormalization with the input's statistics (the running ones' update is training's, not the
    graph's); with the running statistics, the eval-mode batch norm they define."""
    dtype, channels = _np(L.out), input.shape[1]
    x = _operand(L, input, dtype)
    scale, shift = _per_channel(L, weight, channels, dtype, 1), _per_channel(L, bias, channels, dtype, 0)
    if use_input_stats:
        return L.op("InstanceNormalization", x, scale, shift, epsilon=float(eps))
    return L.op("BatchNormalization", x, scale, shift, _operand(L, running_mean, dtype),
                _operand(L, running_var, dtype), epsilon=float(eps))


@lowers("local_response_norm")
def _local_response_norm(L, input, size, alpha=1e-4, beta=0.75, k=1.0):
    """LRN over the input seen as (N, C, rest, 1) (ONNX Runtime's takes 4-D only) for an odd size. ONNX's window
    reaches (size - 1) // 2 channels back, torch's size // 2, and ONNX Runtime refuses an even size: then the
    average of the squares is an AveragePool over (N, 1, C, rest) with torch's uneven channel padding."""
    x = L.value(input)
    if input.numel() == 0:
        return x
    shape, dtype = L.op("Shape", x), _np(L.out)
    if size % 2:
        out = L.op("LRN", L.op("Reshape", x, L.ints([0, 0, -1, 1])), alpha=float(alpha), beta=float(beta),
                   bias=float(k), size=int(size))
        return L.op("Reshape", out, shape)
    squares = L.op("Reshape", L.op("Mul", x, x), L.ints([0, 1, input.shape[1], -1]))
    mean = L.op("AveragePool", squares, kernel_shape=[size, 1], pads=[size // 2, 0, (size - 1) // 2, 0],
                count_include_pad=1)
    scaled = L.op("Add", L.op("Mul", L.op("Reshape", mean, shape), L.constant(np.array(alpha, dtype))),
                  L.constant(np.array(k, dtype)))
    return L.op("Div", x, L.op("Pow", scaled, L.constant(np.array(beta, dtype))))


@lowers("embedding_bag")
def _embedding_bag(L, input, weight, offsets=None, max_norm=None, norm_type=2, scale_grad_by_freq=False, mode="mean",
                   sparse=False, per_sample_weights=None, include_last_offset=False, padding_idx=None):
    """Each index's bag is the number of offsets at or before its position, less one; indices of no bag (after
    include_last_offset's last offset, or padding_idx) go to an extra bag, dropped at the end. Sums (and the
    counts of means) are ScatterElements adds, maxima a ScatterElements max over -inf (an empty bag: 0)."""
    if max_norm is not None:
        raise NotImplementedError("minidl.onnx.export: embedding_bag with max_norm (it rewrites the weight) is not "
                                  "lowered")
    dtype, i64 = _np(L.out), np.dtype(np.int64)
    flat = L.op("Reshape", _operand(L, input, i64), L.ints([-1]))
    positions = L.op("Range", L.constant(0, i64), L.op("Squeeze", L.op("Shape", flat), L.ints([0])),
                     L.constant(1, i64))
    if input.ndim == 2:   # (bags of the input's row length, read in the graph: at least 1, for empty rows)
        length = L.op("Gather", L.op("Shape", L.value(input)), L.constant(1, i64), axis=0)
        starts = L.op("Range", L.constant(0, i64), L.op("Squeeze", L.op("Shape", flat), L.ints([0])),
                      L.op("Max", length, L.constant(1, i64)))
    else:
        starts = _operand(L, offsets, i64)
    count = L.op("Shape", starts)
    if include_last_offset and input.ndim == 1:
        count = L.op("Sub", count, L.constant(np.array([1], i64)))
    ahead = L.op("LessOrEqual", L.op("Unsqueeze", starts, L.ints([0])), L.op("Unsqueeze", positions, L.ints([1])))
    bag = L.op("Sub", L.op("ReduceSum", L.op("Cast", ahead, to=code(i64)), L.ints([1]), keepdims=0),
               L.constant(1, i64))
    outside = L.op("GreaterOrEqual", bag, count)
    if padding_idx is not None:
        outside = L.op("Or", outside, L.op("Equal", flat, L.constant(padding_idx % weight.shape[0], i64)))
    bag = L.op("Where", outside, count, bag)
    rows = L.op("Gather", _operand(L, weight, dtype), flat, axis=0)
    if per_sample_weights is not None:
        weights = L.op("Reshape", _operand(L, per_sample_weights, dtype), L.ints([-1, 1]))
        rows = L.op("Mul", rows, weights)
    width = L.ints([weight.shape[1]])
    bags = L.op("Add", count, L.constant(np.array([1], i64)))
    index = L.op("Expand", L.op("Unsqueeze", bag, L.ints([1])), L.op("Concat", L.op("Shape", flat), width, axis=0))
    start = -np.inf if mode == "max" else 0
    init = L.op("Expand", L.constant(np.array(start, dtype)), L.op("Concat", bags, width, axis=0))
    out = L.op("ScatterElements", init, index, rows, axis=0, reduction="max" if mode == "max" else "add")
    out = L.op("Slice", out, L.ints([0]), count, L.ints([0]))
    if mode == "max":
        return L.op("Where", L.op("IsInf", out, detect_positive=0), L.constant(np.array(0, dtype)), out)
    if mode == "sum":
        return out
    ones = L.op("Cast", L.op("Not", outside), to=code(dtype))
    sizes = L.op("ScatterElements", L.op("Expand", L.constant(np.array(0, dtype)), bags), bag, ones, axis=0,
                 reduction="add")
    sizes = L.op("Slice", sizes, L.ints([0]), count, L.ints([0]))
    return L.op("Div", out, L.op("Unsqueeze", L.op("Max", sizes, L.constant(np.array(1, dtype))), L.ints([1])))
