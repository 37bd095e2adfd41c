"""ONNX lowerings of the NaN-ignoring reductions, order statistics, searches and the trapezoid rule
(minidl/ops/reduction_more.py, search.py), where ONNX has the op or a short composition of its ops does.
cummax, cummin, mode, nanmedian, quantile, unique_consecutive, nonzero_static and histogram have none.
See ``lowerings``."""
from __future__ import annotations

import numpy as np

from .lowerings import INT64_MAX, _dim, _np, _numel, _operand, _sizes, lowers
from .nn_lowerings import _axes, _reduce


def _float(x):
    return np.issubdtype(_np(x), np.floating)


def _zero_nan(L, x, dtype):
    """x in ``dtype`` with its NaNs made 0."""
    value = _operand(L, x, dtype)
    if not _float(x):
        return value
    return L.op("Where", L.op("IsNaN", value), L.constant(0, dtype), value)


@lowers("nansum")
def _nansum(L, x, dim=None, keepdim=False, *, dtype=None):
    return _reduce(L, "ReduceSum", _zero_nan(L, x, _np(L.out)), x, dim, keepdim)


@lowers("nanmean")
def _nanmean(L, x, dim=None, keepdim=False, *, dtype=None):
    out = _np(L.out)
    kept = L.op("Cast", L.op("Not", L.op("IsNaN", L.value(x))), to=L.type_code(out))
    return L.op("Div", _reduce(L, "ReduceSum", _zero_nan(L, x, out), x, dim, keepdim),
                _reduce(L, "ReduceSum", kept, x, dim, keepdim))


@lowers("aminmax")
def _aminmax(L, x, *, dim=None, keepdim=False):
    value = L.value(x)
    return _reduce(L, "ReduceMin", value, x, dim, keepdim), _reduce(L, "ReduceMax", value, x, dim, keepdim)


@lowers("logcumsumexp")
def _logcumsumexp(L, x, dim):
    """log(cumsum(exp(x - m))) + m, m the (finite) max along dim."""
    if x.ndim == 0:
        return L.op("Identity", L.value(x))
    dtype = _np(L.out)
    value, axis = _operand(L, x, dtype), _dim(dim, x.ndim)
    top = L.op("ReduceMax", value, L.ints([axis]), keepdims=1)
    top = L.op("Where", L.op("IsInf", top), L.constant(0, dtype), top)
    summed = L.op("CumSum", L.op("Exp", L.op("Sub", value, top)), L.scalar(axis))
    return L.op("Add", L.op("Log", summed), top)


def _kth(L, value, axis, k, keepdim):
    """The k-th smallest (1-based) along ``axis`` and its index: TopK's k smallest, the last of them."""
    values, indices = L.op("TopK", value, L.ints([k]), outputs=2, axis=axis, largest=0, sorted=1)
    pick = [L.op("Slice", v, L.ints([k - 1]), L.ints([k]), L.ints([axis])) for v in (values, indices)]
    if keepdim:
        return tuple(pick)
    return tuple(L.op("Squeeze", v, L.ints([axis])) for v in pick)


@lowers("kthvalue")
def _kthvalue(L, x, k, dim=-1, keepdim=False):
    if x.ndim == 0:
        return L.op("Identity", L.value(x)), L.constant(0, np.int64)
    return _kth(L, L.value(x), _dim(dim, x.ndim), k, keepdim)


@lowers("median")
def _median(L, x, dim=None, keepdim=False):
    """The lower median by TopK (no NaN handling: ONNX leaves TopK's order of NaNs open); its k from the
    traced sizes, so it follows the input."""
    if x.ndim == 0:
        value = L.op("Identity", L.value(x))
        return value if dim is None else (value, L.constant(0, np.int64))
    if dim is None:
        flat = L.op("Reshape", L.value(x), L.ints([-1]))
        return L.op("Squeeze", _kth(L, flat, 0, (_numel(L, x) - 1) // 2 + 1, True)[0], L.ints([0]))
    axis = _dim(dim, x.ndim)
    return _kth(L, L.value(x), axis, (_sizes(L, x)[axis] - 1) // 2 + 1, keepdim)


def _dtype_of(v):
    return _np(v) if hasattr(v, "dtype") else np.asarray(v).dtype


def _searched(L, boundaries, boundaries_dtype, values, right, out_int32):
    """How many of ``boundaries`` (a value: its last dim) are below (right: at most) each of ``values``."""
    dtype = np.result_type(boundaries_dtype, _dtype_of(values))
    if dtype != boundaries_dtype:
        boundaries = L.op("Cast", boundaries, to=L.type_code(dtype))
    seq = L.op("Unsqueeze", boundaries, L.ints([-2]))
    vals = L.op("Unsqueeze", _operand(L, values, dtype), L.ints([-1]))
    below = L.op("LessOrEqual" if right else "Less", seq, vals)
    count = L.op("ReduceSum", L.op("Cast", below, to=L.type_code(np.dtype(np.int64))), L.ints([-1]), keepdims=0)
    return L.op("Cast", count, to=L.type_code(np.dtype(np.int32))) if out_int32 else count


@lowers("searchsorted")
def _searchsorted(L, sorted_sequence, input, *, out_int32=False, right=False, side=None, sorter=None):
    boundaries = L.value(sorted_sequence)
    if sorter is not None:
        boundaries = L.op("GatherElements", boundaries, L.value(sorter), axis=-1)
    return _searched(L, boundaries, _np(sorted_sequence), input, right or side == "right", out_int32)


@lowers("bucketize")
def _bucketize(L, input, boundaries, *, out_int32=False, right=False):
    return _searched(L, L.value(boundaries), _np(boundaries), input, right, out_int32)


@lowers("isin")
def _isin(L, elements, test_elements, *, assume_unique=False, invert=False):
    dtype = np.result_type(_dtype_of(elements), _dtype_of(test_elements))
    pool = L.op("Reshape", _operand(L, test_elements, dtype), L.ints([-1]))
    equal = L.op("Equal", L.op("Unsqueeze", _operand(L, elements, dtype), L.ints([-1])), pool)
    found = L.op("ReduceMax", L.op("Cast", equal, to=L.type_code(np.dtype(np.int32))), L.ints([-1]), keepdims=0)
    found = L.op("Cast", found, to=L.type_code(np.dtype(np.bool_)))
    return L.op("Not", found) if invert else found


@lowers("argwhere")
def _argwhere(L, x):
    return L.op("Transpose", L.op("NonZero", L.value(x)), perm=[1, 0])


def _pairs(L, y, axis):
    left = L.op("Slice", y, L.ints([0]), L.ints([-1]), L.ints([axis]))
    return L.op("Add", left, L.op("Slice", y, L.ints([1]), L.ints([INT64_MAX]), L.ints([axis])))


def _steps(L, y, x, dx, axis, dtype):
    """The gaps between the sample points: x's differences along ``axis``, or the constant dx (default 1)."""
    if x is None or not hasattr(x, "dtype"):
        return L.constant(1 if x is None and dx is None else (dx if x is None else x), dtype)
    value = _operand(L, x, dtype)
    if x.ndim == 1 and y.ndim > 1:
        value = L.op("Reshape", value, L.ints([-1 if d == axis else 1 for d in range(y.ndim)]))
    upper = L.op("Slice", value, L.ints([1]), L.ints([INT64_MAX]), L.ints([axis]))
    return L.op("Sub", upper, L.op("Slice", value, L.ints([0]), L.ints([-1]), L.ints([axis])))


def _trapezoid_rule(reduce):
    def rule(L, y, x=None, *, dx=None, dim=-1):
        dtype, axis = _np(L.out), _dim(dim, y.ndim)
        terms = L.op("Mul", _pairs(L, _operand(L, y, dtype), axis), _steps(L, y, x, dx, axis, dtype))
        summed = (L.op("ReduceSum", terms, L.ints([axis]), keepdims=0) if reduce == "sum"
                  else L.op("CumSum", terms, L.scalar(axis)))
        return L.op("Div", summed, L.constant(2, dtype))
    return rule


for _name, _reduce_kind in (("trapezoid", "sum"), ("trapz", "sum"), ("cumulative_trapezoid", "cumsum")):
    lowers(_name)(_trapezoid_rule(_reduce_kind))


def _p_norm(L, value, p, axes, keepdim, dtype):
    """The p-norm over ``axes`` (None: all) for every p torch takes: 0 counts the nonzeros, +-inf is the largest
    or smallest magnitude, else (sum |x|**p) ** (1/p) (a negative p: 0 where a magnitude is 0, as ONNX's Pow
    makes it)."""
    size = L.op("Abs", value)
    args = (size,) if axes is None else (size, axes)
    if p == 0:
        nonzero = L.op("Cast", L.op("Not", L.op("Equal", value, L.constant(0, dtype))), to=L.type_code(dtype))
        return L.op("ReduceSum", nonzero, *args[1:], keepdims=keepdim)
    if p == float("inf"):
        return L.op("ReduceMax", *args, keepdims=keepdim)
    if p == float("-inf"):
        return L.op("ReduceMin", *args, keepdims=keepdim)
    if p == 2:
        return L.op("ReduceL2", value, *args[1:], keepdims=keepdim)
    if p == 1:
        return L.op("ReduceSum", *args, keepdims=keepdim)
    powered = L.op("Pow", size, L.constant(p, dtype))
    total = L.op("ReduceSum", powered, *args[1:], keepdims=keepdim)
    return L.op("Pow", total, L.constant(1.0 / p, dtype))


@lowers("dist")
def _dist(L, input, other, p=2):
    dtype = _np(L.out)
    difference = L.op("Sub", _operand(L, input, dtype), _operand(L, other, dtype))
    return _p_norm(L, difference, p, None, 0, dtype)


@lowers("renorm")
def _renorm(L, input, p, dim, maxnorm):
    dtype, axis = _np(L.out), _dim(dim, input.ndim)
    value = L.value(input)
    others = [d for d in range(input.ndim) if d != axis]
    size = _p_norm(L, value, p, _axes(L, input, others), 1, dtype) if others else L.op("Abs", value)
    limit = L.constant(maxnorm, dtype)
    factor = L.op("Where", L.op("Greater", size, limit),
                  L.op("Div", limit, L.op("Add", size, L.constant(1e-7, dtype))), L.constant(1, dtype))
    return L.op("Mul", value, factor)
