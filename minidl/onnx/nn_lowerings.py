"""ONNX lowerings of the neural-network ops: matrix products, reductions, softmax, the layers'
functions (linear, convolution, pooling, normalisation, embedding, attention). See ``lowerings``."""
from __future__ import annotations

import numpy as np

from .. import _dtype as dt
from ..ops.linalg import einsum_equation
from ..ops.registry import attach_rule
from .lowerings import _dim, _np, _operand, _sizes, lowers


@lowers("matmul", "mm", "bmm")
def _matmul(L, a, b):
    return L.op("MatMul", L.value(a), L.value(b))


@lowers("addmm", "baddbmm")
def _addmm(L, x, m1, m2, beta=1, alpha=1):
    dtype = _np(L.out)
    product = L.op("MatMul", L.value(m1), L.value(m2))
    if alpha != 1:
        product = L.op("Mul", product, L.constant(alpha, dtype))
    if beta == 0:
        return product
    bias = _operand(L, x, dtype)
    return L.op("Add", product, bias if beta == 1 else L.op("Mul", bias, L.constant(beta, dtype)))


@lowers("linear")
def _linear(L, input, weight, bias=None):
    out = L.op("MatMul", L.value(input), L.op("Transpose", L.value(weight), perm=[1, 0]))
    return out if bias is None else L.op("Add", out, L.value(bias))


def _axes(L, x, dim):
    dims = range(x.ndim) if dim is None else dim if isinstance(dim, (tuple, list)) else [dim]
    return L.ints(sorted(_dim(d, x.ndim) for d in dims))


def _reduce(L, op_type, value, x, dim, keepdim):
    """A Reduce* node over ``dim`` of x (all dims if None); a 0-d x is its own reduction."""
    if x.ndim == 0:
        return L.op("Identity", value)
    return L.op(op_type, value, _axes(L, x, dim), keepdims=int(bool(keepdim)))


def _reduction(op_type):
    def rule(L, x, dim=None, keepdim=False, dtype=None):
        value = L.value(x)
        if _np(x) != _np(L.out):
            value = L.op("Cast", value, to=L.type_code(L.out.dtype))
        return _reduce(L, op_type, value, x, dim, keepdim)
    return rule


for _name, _op_type in {"sum": "ReduceSum", "mean": "ReduceMean"}.items():
    attach_rule(_name, "onnx", _reduction(_op_type))


def _extreme(op_type):
    return lambda L, x, dim=None, keepdim=False: _reduce(L, op_type, L.value(x), x, dim, keepdim)


attach_rule("amax", "onnx", _extreme("ReduceMax"))
attach_rule("amin", "onnx", _extreme("ReduceMin"))


def _any_all(op_type):
    def rule(L, x, dim=None, keepdim=False):
        as_int = L.op("Cast", L.value(x), to=L.type_code(np.dtype(np.int32)))
        reduced = _reduce(L, op_type, as_int, x, dim, keepdim)
        return L.op("Cast", reduced, to=L.type_code(np.dtype(np.bool_)))
    return rule


attach_rule("any", "onnx", _any_all("ReduceMax"))
attach_rule("all", "onnx", _any_all("ReduceMin"))


def _softmax(op_type):
    def rule(L, x, dim, dtype=None):
        value = L.value(x)
        if _np(x) != _np(L.out):
            value = L.op("Cast", value, to=L.type_code(L.out.dtype))
        return L.op(op_type, value, axis=_dim(dim, x.ndim))
    return rule


attach_rule("softmax", "onnx", _softmax("Softmax"))
attach_rule("log_softmax", "onnx", _softmax("LogSoftmax"))


@lowers("embedding")
def _embedding(L, input, weight, padding_idx=None, max_norm=None, norm_type=2.0, scale_grad_by_freq=False,
               sparse=False):
    if max_norm is not None:
        raise NotImplementedError("minidl.onnx.export: embedding with max_norm (it rewrites the weight) is not "
                                  "lowered")
    return L.op("Gather", L.value(weight), _operand(L, input, np.dtype(np.int64)), axis=0)


@lowers("layer_norm")
def _layer_norm(L, input, normalized_shape, weight=None, bias=None, eps=1e-5):
    dims = [normalized_shape] if isinstance(normalized_shape, int) else list(normalized_shape)
    scale = L.value(weight) if weight is not None else L.constant(np.ones(dims, _np(input)))
    return L.op("LayerNormalization", L.value(input), scale, None if bias is None else L.value(bias),
                axis=-len(dims), epsilon=float(eps))


def _standardized(L, x, dtype, axes, eps, centre):
    """x / sqrt(mean(x**2) + eps) over ``axes`` (an ints vector), x centred on its mean first when ``centre``."""
    if centre:
        x = L.op("Sub", x, L.op("ReduceMean", x, axes, keepdims=1))
    var = L.op("ReduceMean", L.op("Mul", x, x), axes, keepdims=1)
    return L.op("Div", x, L.op("Sqrt", L.op("Add", var, L.constant(eps, dtype))))


@lowers("rms_norm")
def _rms_norm(L, input, normalized_shape, weight=None, eps=None):
    dims = 1 if isinstance(normalized_shape, int) else len(normalized_shape)
    dtype = _np(input)
    eps = float(np.finfo(np.float32 if dtype.itemsize < 4 else dtype).eps) if eps is None else float(eps)
    out = _standardized(L, L.value(input), dtype, L.ints(list(range(input.ndim - dims, input.ndim))), eps, False)
    return out if weight is None else L.op("Mul", out, L.value(weight))


@lowers("group_norm")
def _group_norm(L, input, num_groups, weight=None, bias=None, eps=1e-5):
    """Standardised over (N, groups, the rest) rows, then the per-channel affine."""
    dtype, x = _np(input), L.value(input)
    rows = L.op("Reshape", x, L.ints([0, num_groups, -1]))   # (0: keep that dim)
    out = L.op("Reshape", _standardized(L, rows, dtype, L.ints([2]), float(eps), True), L.op("Shape", x))
    channel = [input.shape[1]] + [1] * (input.ndim - 2)
    if weight is not None:
        out = L.op("Mul", out, L.op("Reshape", L.value(weight), L.ints(channel)))
    if bias is not None:
        out = L.op("Add", out, L.op("Reshape", L.value(bias), L.ints(channel)))
    return out


@lowers("batch_norm")
def _batch_norm(L, input, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1,
                eps=1e-5):
    if training or running_mean is None:
        raise NotImplementedError("minidl.onnx.export: batch_norm in training mode (batch statistics) is not "
                                  "lowered; export the model in eval mode")
    channels, dtype = input.shape[1], _np(L.out)
    scale = _operand(L, weight, dtype) if weight is not None else L.constant(np.ones(channels, dtype))
    shift = _operand(L, bias, dtype) if bias is not None else L.constant(np.zeros(channels, dtype))
    return L.op("BatchNormalization", _operand(L, input, dtype), scale, shift, _operand(L, running_mean, dtype),
                _operand(L, running_var, dtype), epsilon=float(eps))


def _pair(v, n=2):
    return list(v) if isinstance(v, (tuple, list)) else [v] * n


@lowers("conv2d", "conv1d")  # (conv3d too: pool_lowerings)
def _conv(L, input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    n = weight.ndim - 2
    attributes = dict(strides=_pair(stride, n), dilations=_pair(dilation, n), group=groups)
    if padding == "same":
        attributes["auto_pad"] = "SAME_UPPER"
    elif padding != "valid":
        pads = _pair(padding, n)
        attributes["pads"] = pads + pads
    unbatched = input.ndim == weight.ndim - 1
    x = L.op("Unsqueeze", L.value(input), L.ints([0])) if unbatched else L.value(input)
    out = L.op("Conv", x, L.value(weight), None if bias is None else L.value(bias), **attributes)
    return L.op("Squeeze", out, L.ints([0])) if unbatched else out


def _arg(op_type):
    def rule(L, x, dim=None, keepdim=False):
        if dim is None:   # (over the flattened tensor)
            return L.op(op_type, L.op("Reshape", L.value(x), L.ints([-1])), axis=0, keepdims=0)
        return L.op(op_type, L.value(x), axis=_dim(dim, x.ndim), keepdims=int(bool(keepdim)))
    return rule


attach_rule("argmax", "onnx", _arg("ArgMax"))
attach_rule("argmin", "onnx", _arg("ArgMin"))


def _max_min(reduce, arg, pairwise):
    """max(x) (all), max(x, dim, keepdim) (values, indices), or max(a, b) (elementwise)."""
    def rule(L, x, dim=None, keepdim=False):
        if hasattr(dim, "shape"):
            return L.op(pairwise, L.value(x), _operand(L, dim, _np(x)))
        if dim is None:
            return _reduce(L, reduce, L.value(x), x, None, False)
        if x.ndim == 0:   # (a 0-d tensor is its own max, at index 0)
            return L.op("Identity", L.value(x)), L.constant(0, np.int64)
        axes = L.ints([_dim(dim, x.ndim)])
        return (L.op(reduce, L.value(x), axes, keepdims=int(bool(keepdim))),
                L.op(arg, L.value(x), axis=_dim(dim, x.ndim), keepdims=int(bool(keepdim))))
    return rule


attach_rule("max", "onnx", _max_min("ReduceMax", "ArgMax", "Max"))
attach_rule("min", "onnx", _max_min("ReduceMin", "ArgMin", "Min"))
attach_rule("prod", "onnx", _reduction("ReduceProd"))


@lowers("logsumexp")
def _logsumexp(L, x, dim, keepdim=False):
    return _reduce(L, "ReduceLogSumExp", L.value(x), x, dim, keepdim)


@lowers("cumsum")
def _cumsum(L, x, dim, dtype=None):
    value = L.value(x)
    if _np(x) != _np(L.out):
        value = L.op("Cast", value, to=L.type_code(L.out.dtype))
    return L.op("CumSum", value, L.scalar(_dim(dim, x.ndim)))


def _moments(L, x, dim, correction, keepdim):
    """The variance over ``dim`` with ``correction`` taken from the count, as torch's var; the
    count is the product of the (possibly traced) sizes reduced, so it follows the input."""
    value, axes = L.value(x), _axes(L, x, dim)
    mean = L.op("ReduceMean", value, axes, keepdims=1)
    centred = L.op("Sub", value, mean)
    total = L.op("ReduceSum", L.op("Mul", centred, centred), axes, keepdims=int(bool(keepdim)))
    count = L.op("ReduceProd", L.op("Gather", L.op("Shape", value), axes, axis=0), keepdims=0)
    dof = L.op("Max", L.op("Sub", L.op("Cast", count, to=L.type_code(_np(x))), L.constant(correction, _np(x))),
               L.constant(0, _np(x)))
    return L.op("Div", total, dof)


def _correction(unbiased, correction):
    if correction is not None:
        return correction
    return 0 if unbiased is False else 1


@lowers("var")
def _var(L, x, dim=None, unbiased=None, keepdim=False, correction=None):
    return _moments(L, x, dim, _correction(unbiased, correction), keepdim)


@lowers("std")
def _std(L, x, dim=None, unbiased=None, keepdim=False, correction=None):
    return L.op("Sqrt", _moments(L, x, dim, _correction(unbiased, correction), keepdim))


@lowers("index_select")
def _index_select(L, x, dim, index):
    return L.op("Gather", L.value(x), _operand(L, index, np.dtype(np.int64)), axis=_dim(dim, x.ndim))


@lowers("gather")
def _gather(L, x, dim, index):
    return L.op("GatherElements", L.value(x), _operand(L, index, np.dtype(np.int64)), axis=_dim(dim, x.ndim))


@lowers("dot")
def _dot(L, a, b):
    return L.op("ReduceSum", L.op("Mul", L.value(a), L.value(b)), L.ints([0]), keepdims=0)


@lowers("outer")
def _outer(L, a, b):
    return L.op("Mul", L.op("Unsqueeze", L.value(a), L.ints([1])), L.op("Unsqueeze", L.value(b), L.ints([0])))


@lowers("einsum")
def _einsum(L, equation, *operands):
    equation, operands = einsum_equation(equation, *operands)
    return L.op("Einsum", *[L.value(t) for t in operands], equation=equation.replace(" ", ""))


@lowers("_fused_attention")
def _fused_attention(L, query, key, value, attn_mask, scale, is_causal, enable_gqa, dropout_p=0.0):
    """The attention kernel as the composition it computes: softmax(q k^T * scale + mask) v, with the key/value
    heads repeated for grouped queries, the causal limit as an additive -inf above the diagonal, and zeros for a
    row that the mask leaves no key (the kernel's result, where ONNX's Softmax would give NaN)."""
    if dropout_p:
        raise NotImplementedError("minidl.onnx.export: scaled_dot_product_attention with dropout_p > 0 (training-mode "
                                  "dropout) is not lowered; export in eval mode")
    compute = np.dtype(np.float64) if _np(query) == np.float64 else np.dtype(np.float32)
    q, k, v = (_operand(L, t, compute) for t in (query, key, value))
    if enable_gqa:
        groups = query.shape[-3] // key.shape[-3]
        k, v = (_repeat_heads(L, name, t, groups) for name, t in ((k, key), (v, value)))
    k_t = L.op("Transpose", k, perm=list(range(key.ndim - 2)) + [key.ndim - 1, key.ndim - 2])
    scores = L.op("Mul", L.op("MatMul", q, k_t), L.constant(scale, compute))
    if is_causal:
        above = L.op("ConstantOfShape", L.ints([_sizes(L, query)[-2], _sizes(L, key)[-2]]),
                     value=np.array([-np.inf], dtype=compute))
        scores = L.op("Add", scores, L.op("Trilu", above, L.scalar(1), upper=1))
    dead = None
    if attn_mask is not None:
        if attn_mask.dtype is dt.bool_:
            scores = L.op("Where", L.value(attn_mask), scores, L.constant(-np.inf, compute))
        else:
            scores = L.op("Add", scores, _operand(L, attn_mask, compute))
        top = L.op("ReduceMax", scores, L.ints([-1]), keepdims=1)
        dead = L.op("Equal", top, L.constant(-np.inf, compute))
        scores = L.op("Where", dead, L.constant(0.0, compute), scores)
    weights = L.op("Softmax", scores, axis=-1)
    if dead is not None:
        weights = L.op("Where", dead, L.constant(0.0, compute), weights)
    out = L.op("MatMul", weights, v)
    return out if _np(L.out) == compute else L.op("Cast", out, to=L.type_code(L.out.dtype))


def _repeat_heads(L, name, t, groups):
    """(..., Hkv, S, E) -> (..., Hkv * groups, S, E), each key/value head serving ``groups`` query heads."""
    sizes = _sizes(L, t)
    wide = L.op("Expand", L.op("Unsqueeze", name, L.ints([t.ndim - 2])), L.ints([1] * (t.ndim - 2) + [groups, 1, 1]))
    return L.op("Reshape", wide, L.ints(list(sizes[:-3]) + [sizes[-3] * groups] + list(sizes[-2:])))
