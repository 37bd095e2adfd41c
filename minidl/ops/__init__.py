"""Every op, written once for all devices. ``minidl`` re-exports these as its functions and
``Tensor`` exposes those in TENSOR_METHODS as methods.

Reading order, bottom-up (a module imports only those above it in this list):

- ``core``: launching primitives on tensors, casting, scalars, broadcasting gradients
- ``random``: the counter-based generators
- ``conversion``: moving between dtypes and devices
- ``take_put``: ``Take`` and ``IndexPut``, the two movers indexing is made of
- ``views``: new layouts over the same storage
- ``inplace``: writing into a tensor's memory with autograd kept right
- ``creation``: factories and numpy interop
- ``autocast_mode``: autocast's state and the wrapper that applies its policies
- ``elementwise``: unary, binary, compare, where, clamp and their composites
- ``shape_ops``: cat, stack, split, repeat, flip, roll, pad, ...
- ``indexing``: ``x[...]``, ``x[...] = v``, gather/scatter
- ``reduction``: sum, prod, max/min, scans, softmax
- ``linalg``: matrix products
- ``sorting``: sort, topk, unique, bincount, histc
- ``conv``: convolution and pooling
- ``fused``: the fused optimizer steps
"""
from ..formulas import UNARY as _UNARY
from . import creation, elementwise, indexing, linalg, reduction, shape_ops, sorting, views
from .conversion import to_device, to_dtype
from .creation import (arange, as_tensor, bernoulli, empty, empty_like, eye, from_numpy, full, full_like, linspace,
                       multinomial, normal, ones, ones_like, rand, rand_like, randint, randint_like, randn, randn_like,
                       randperm, tensor, zeros, zeros_like)
from .elementwise import (add, addcdiv, addcmul, allclose, arctan2, atan2, clamp, clamp_max, clamp_min, clip, div, eq,
                          equal, floor_divide, fmax, fmin, frac, ge, gt, isclose, isfinite, isinf, isnan, le, lerp,
                          logaddexp, logical_and, logical_not, logical_or, logical_xor, lt, maximum, minimum, mul,
                          multiply, nan_to_num, ne, pow, remainder, sub, subtract, true_divide, where)
from .indexing import (gather, getitem, index_add, index_copy, index_fill, index_select, masked_fill, masked_scatter,
                       masked_select, nonzero, scatter, scatter_add, setitem, take)
from .linalg import addmm, baddbmm, bmm, cdist, diag, dot, einsum, matmul, mm, outer, trace
from .reduction import (all, amax, amin, any, argmax, argmin, count_nonzero, cumprod, cumsum, log_softmax,
                        logsumexp, max, mean, min, norm, prod, softmax, std, std_mean, sum, var, var_mean)
from .shape_ops import (cat, chunk, concat, concatenate, flip, meshgrid, pad, repeat, roll, split, stack, tril, triu,
                        unbind)
from .sorting import argsort, bincount, histc, msort, sort, topk, unique
from .views import (as_strided, broadcast_shapes, broadcast_tensors, broadcast_to, clone, contiguous, diagonal, expand,
                    flatten, movedim, narrow, permute, reshape, squeeze, t, transpose, unflatten, unsqueeze, view)

# every unary op of the formula table (minidl/formulas/table.py), and its Tensor method
globals().update({f.name: getattr(elementwise, f.name) for f in _UNARY})
negative = neg  # noqa: F821
absolute = abs  # noqa: F821
divide = div
swapaxes = swapdims = transpose
greater, greater_equal, less, less_equal, not_equal = gt, ge, lt, le, ne

# functions that are also Tensor methods (x.sum(...) calls sum(x, ...))
TENSOR_METHODS = (
    "add", "clamp", "clip", "div", "eq", "floor_divide", "ge", "gt", "isfinite", "isinf", "isnan", "le",
    "logical_and", "logical_not", "logical_or", "logical_xor", "lt", "maximum", "minimum", "mul", "multiply",
    "ne", "pow", "remainder", "sub", "subtract", "true_divide", "where", "gather", "index_add",
    "index_select", "masked_fill", "masked_select", "nonzero", "scatter", "scatter_add", "take", "bmm", "dot",
    "matmul", "mm", "outer", "all", "amax", "amin", "any", "argmax", "argmin", "count_nonzero", "cumprod",
    "cumsum", "log_softmax", "logsumexp", "max", "mean", "min", "norm", "prod", "softmax", "std", "sum", "var",
    "chunk", "flip", "repeat", "roll", "split", "tril", "triu", "unbind", "as_strided", "clone", "contiguous",
    "diagonal", "expand", "flatten", "movedim", "narrow", "permute", "reshape", "squeeze", "broadcast_to", "t",
    "transpose", "unflatten", "unsqueeze", "view", "negative", "absolute", "divide", "swapaxes", "swapdims",
    "greater", "greater_equal", "less", "less_equal", "not_equal", "addcdiv", "addcmul", "allclose", "arctan2",
    "atan2", "clamp_max", "clamp_min", "equal", "fmax", "fmin", "frac", "isclose", "lerp", "logaddexp",
    "nan_to_num", "index_copy", "index_fill", "masked_scatter", "addmm", "baddbmm", "diag", "trace", "argsort",
    "bincount", "histc", "msort", "sort", "topk", "unique", "bernoulli", "multinomial",
) + tuple(f.name for f in _UNARY)
