"""Each op's ONNX lowering, declared once: attached to the op's registry entry as its ``onnx``
rule (``ops.registry.attach_rule``). A rule is called as ``rule(L, *args, **kwargs)`` with the
op's own arguments after it has run eagerly; ``L`` (``tracer.Lowering``) gives the graph values of
tensors and sizes (``L.value``, ``L.ints``), the node maker ``L.op`` and the eager result
``L.out``. It returns the output's value name (a tuple for several outputs).

An op written over other registry ops may instead be declared ``composite``: the ops it calls are recorded
with their own lowerings, and together they are its graph.

``FUNCTION_OPS`` names the op whose rule stands for a Function that operators apply directly
(``x + y`` is ``Add.apply``, the ``add`` op's Function).
"""
from __future__ import annotations

import inspect

import numpy as np

from ..ops import conversion
from ..ops import elementwise as ew
from ..ops.registry import OPS, attach_rule
from .._dtype import result_type
from .dtypes import code, numpy_dtype
from .tracer import COMPOSITE, TracedInt, warn

INT64_MAX, INT64_MIN = np.iinfo(np.int64).max, np.iinfo(np.int64).min


def lowers(*names):
    def declare(rule):
        for name in names:
            attach_rule(name, "onnx", rule)
        return rule
    return declare


def composite(*names):
    """Lower each of these ops through the ops it is written with: their own lowerings make its graph."""
    for name in names:
        attach_rule(name, "onnx", COMPOSITE)


def _dim(d, ndim):
    return d + ndim if d < 0 else d


def _np(t):
    return numpy_dtype(t.dtype)


def _operand(L, x, dtype):
    """A tensor or Python number as a value of numpy dtype ``dtype`` (cast if it differs)."""
    if hasattr(x, "dtype") and hasattr(x, "shape"):
        if _np(x) != dtype and L.tracer.constant(x):   # (a constant is stored in the dtype wanted)
            return L.constant(x.detach().numpy(force=True).astype(dtype))
        name = L.value(x)
        return name if _np(x) == dtype else L.op("Cast", name, to=code(dtype))
    return L.value(x, dtype)


def _sizes(L, x):
    """x's sizes as TracedInts when x is traced (so shapes built from them stay dynamic)."""
    if L.tracer.traced(x):
        return list(L.tracer.traced_shape(x))
    return list(x.shape)


def _numel(L, x):
    """x's element count, the product of its traced sizes when x is traced."""
    return L.tracer.traced_numel(x) if L.tracer.traced(x) else x.numel()


def _warn_fixed_sizes(L, name, *tensors):
    """Warn when ``name``'s lowering builds its graph from traced tensors' sizes as constants: the
    export then does not follow those sizes (a dynamic axis would fail or be wrong at another size)."""
    if any(L.tracer.traced(t) for t in tensors):
        warn(f"minidl.onnx.export: {name} of a traced tensor is lowered with the sizes it had while tracing; "
             f"the exported graph will not follow other sizes")


def _varargs(shape):
    """A shape given as ``f(x, 2, 3)`` or ``f(x, (2, 3))``."""
    return tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else tuple(shape)


# --------------------------------------------------------------------------------- elementwise
UNARY = {"relu": "Relu", "neg": "Neg", "erf": "Erf", "tanh": "Tanh", "sigmoid": "Sigmoid", "exp": "Exp",
         "log": "Log", "sqrt": "Sqrt", "abs": "Abs", "reciprocal": "Reciprocal", "sin": "Sin", "cos": "Cos",
         "floor": "Floor", "ceil": "Ceil", "sign": "Sign", "logical_not": "Not", "isnan": "IsNaN", "tan": "Tan",
         "atan": "Atan", "asin": "Asin", "acos": "Acos", "sinh": "Sinh", "cosh": "Cosh", "asinh": "Asinh",
         "acosh": "Acosh", "atanh": "Atanh"}


def _unary(op_type):
    return lambda L, x: L.op(op_type, L.value(x))


for _name, _op_type in UNARY.items():
    attach_rule(_name, "onnx", _unary(_op_type))


@lowers("rsqrt")
def _rsqrt(L, x):
    return L.op("Reciprocal", L.op("Sqrt", L.value(x)))


@lowers("square")
def _square(L, x):
    v = L.value(x)
    return L.op("Mul", v, v)


@lowers("_silu")
def _silu(L, x):
    v = L.value(x)
    return L.op("Mul", v, L.op("Sigmoid", v))


def _gelu_of(L, v, inner, odd):
    """v * (1 + odd(c * inner)) / 2, GELU's two forms: (c, odd) is (1/sqrt(2), Erf) or (sqrt(2/pi), Tanh)."""
    dtype = _np(L.out)
    scale = 0.7071067811865476 if odd == "Erf" else 0.7978845608028654
    cdf = L.op("Add", L.constant(1.0, dtype), L.op(odd, L.op("Mul", inner, L.constant(scale, dtype))))
    return L.op("Mul", L.op("Mul", v, L.constant(0.5, dtype)), cdf)


@lowers("_gelu")
def _gelu(L, x):
    v = L.value(x)
    return _gelu_of(L, v, v, "Erf")


@lowers("_gelu_tanh")
def _gelu_tanh(L, x):
    v = L.value(x)
    cubic = L.op("Mul", L.op("Mul", v, L.op("Mul", v, v)), L.constant(0.044715, _np(L.out)))
    return _gelu_of(L, v, L.op("Add", v, cubic), "Tanh")


def _binary(op_type):
    """An arithmetic op: both operands cast to the result's dtype."""
    def rule(L, a, b, alpha=1):
        dtype = _np(L.out)
        b_value = _operand(L, b, dtype)
        if alpha != 1:
            b_value = L.op("Mul", b_value, L.constant(alpha, dtype))
        return L.op(op_type, _operand(L, a, dtype), b_value)
    return rule


for _name, _op_type in {"add": "Add", "sub": "Sub", "mul": "Mul", "pow": "Pow", "maximum": "Max",
                        "minimum": "Min"}.items():
    attach_rule(_name, "onnx", _binary(_op_type))


@lowers("div")
def _div(L, a, b, rounding_mode=None):
    dtype = _np(L.out)
    x, y = _operand(L, a, dtype), _operand(L, b, dtype)
    if np.issubdtype(dtype, np.integer):   # (ONNX's integer Div truncates)
        return _integer_floor(L, x, y) if rounding_mode == "floor" else L.op("Div", x, y)
    out = L.op("Div", x, y)
    if rounding_mode == "floor":
        return L.op("Floor", out)
    return _trunc(L, out) if rounding_mode == "trunc" else out


def _integer_floor(L, x, y):
    """Python's and torch's floor division of integers: (x - x mod y) / y, exact (Mod takes the
    divisor's sign, as Python's %)."""
    return L.op("Div", L.op("Sub", x, L.op("Mod", x, y)), y)


def _trunc(L, v):
    return L.op("Mul", L.op("Sign", v), L.op("Floor", L.op("Abs", v)))


@lowers("floor_divide")
def _floor_divide(L, a, b):
    dtype = _np(L.out)
    x, y = _operand(L, a, dtype), _operand(L, b, dtype)
    return _integer_floor(L, x, y) if np.issubdtype(dtype, np.integer) else L.op("Floor", L.op("Div", x, y))


def _comparison(op_type, negate=False):
    def rule(L, a, b):
        dtype = numpy_dtype(result_type(a, b))   # (a Python number weakly, as eager promotes: int < 0.5 in float)
        out = L.op(op_type, _operand(L, a, dtype), _operand(L, b, dtype))
        return L.op("Not", out) if negate else out
    return rule


for _name, _rule in {"gt": _comparison("Greater"), "lt": _comparison("Less"), "ge": _comparison("GreaterOrEqual"),
                     "le": _comparison("LessOrEqual"), "eq": _comparison("Equal"),
                     "ne": _comparison("Equal", negate=True)}.items():
    attach_rule(_name, "onnx", _rule)


def _logical(op_type):
    return lambda L, a, b: L.op(op_type, _operand(L, a, np.dtype(np.bool_)), _operand(L, b, np.dtype(np.bool_)))


for _name, _op_type in {"logical_and": "And", "logical_or": "Or", "logical_xor": "Xor"}.items():
    attach_rule(_name, "onnx", _logical(_op_type))


@lowers("where")
def _where(L, cond, a=None, b=None):
    dtype = _np(L.out)
    return L.op("Where", _operand(L, cond, np.dtype(np.bool_)), _operand(L, a, dtype), _operand(L, b, dtype))


@lowers("masked_fill")
def _masked_fill(L, x, mask, value):
    dtype = _np(L.out)
    return L.op("Where", _operand(L, mask, np.dtype(np.bool_)), _operand(L, value, dtype), L.value(x))


@lowers("clamp")
def _clamp(L, x, min=None, max=None):
    """Clip for number bounds; Max and Min for tensor ones (Clip takes scalars only)."""
    dtype = _np(L.out)
    value = _operand(L, x, dtype)
    if not any(hasattr(b, "shape") for b in (min, max)):
        return L.op("Clip", value, *[None if b is None else L.constant(b, dtype) for b in (min, max)])
    if min is not None:
        value = L.op("Max", value, _operand(L, min, dtype))
    return value if max is None else L.op("Min", value, _operand(L, max, dtype))


attach_rule("clamp_min", "onnx", lambda L, x, min: _clamp(L, x, min=min))
attach_rule("clamp_max", "onnx", lambda L, x, max: _clamp(L, x, max=max))


@lowers("to_dtype")
def _to_dtype(L, x, dtype):
    return L.op("Cast", L.value(x), to=code(L.out.dtype))


@lowers("contiguous", "clone", "to_device")
def _identity(L, x, *args, **kwargs):
    return L.op("Identity", L.value(x))


# ------------------------------------------------------------- elementwise math (where ONNX can say it)
@lowers("sgn")
def _sgn(L, x):
    """Sign, but 0 for NaN as torch.sgn (ONNX's Sign keeps NaN)."""
    sign = L.op("Sign", L.value(x))
    if not x.dtype.is_floating_point:
        return sign
    return L.op("Where", L.op("IsNaN", L.value(x)), L.constant(0, _np(x)), sign)


attach_rule("positive", "onnx", _unary("Identity"))


def _operands_of(L, *xs):
    dtype = _np(L.out)
    return dtype, [_operand(L, x, dtype) for x in xs]


@lowers("fmod")
def _fmod(L, a, b):
    _, (x, y) = _operands_of(L, a, b)
    return L.op("Mod", x, y, fmod=1)   # (C's remainder: the dividend's sign)


@lowers("hypot")
def _hypot(L, a, b):
    _, (x, y) = _operands_of(L, a, b)
    return L.op("Sqrt", L.op("Add", L.op("Mul", x, x), L.op("Mul", y, y)))


def _sign_bit(L, v, dtype):
    """v < 0, or -0.0 (1 / -0.0 is -inf); a negative NaN is not seen."""
    return L.op("Or", L.op("Less", v, L.constant(0, dtype)),
                L.op("Less", L.op("Div", L.constant(1, dtype), v), L.constant(0, dtype)))


@lowers("copysign")
def _copysign(L, a, b):
    dtype, (x, y) = _operands_of(L, a, b)
    magnitude = L.op("Abs", x)
    return L.op("Where", _sign_bit(L, y, dtype), L.op("Neg", magnitude), magnitude)


@lowers("signbit")
def _signbit(L, x):
    if not x.dtype.is_floating_point:
        return L.op("Less", L.value(x), L.constant(0, _np(x)))
    return _sign_bit(L, L.value(x), _np(x))


def _x_times_log(L, a, b, log_of):
    """x log_of(y), 0 where x == 0, NaN where y is (xlogy, xlog1py)."""
    dtype, (x, y) = _operands_of(L, a, b)
    product = L.op("Where", L.op("Equal", x, L.constant(0, dtype)), L.constant(0, dtype), L.op("Mul", x, log_of(y)))
    return L.op("Where", L.op("IsNaN", y), y, product)


attach_rule("xlogy", "onnx", lambda L, a, b: _x_times_log(L, a, b, lambda y: L.op("Log", y)))
attach_rule("xlog1py", "onnx", lambda L, a, b: _x_times_log(
    L, a, b, lambda y: L.op("Log", L.op("Add", y, L.constant(1, _np(L.out))))))


@lowers("logit")
def _logit(L, x, eps=None):
    dtype, (v,) = _operands_of(L, x)
    if eps is not None:
        v = L.op("Clip", v, L.constant(eps, dtype), L.constant(1 - eps, dtype))
    return L.op("Log", L.op("Div", v, L.op("Sub", L.constant(1, dtype), v)))


@lowers("float_power")
def _float_power(L, a, b):
    _, (x, y) = _operands_of(L, a, b)
    return L.op("Pow", x, y)


@lowers("ldexp")
def _ldexp(L, x, other):
    dtype, (v, e) = _operands_of(L, x, other)
    return L.op("Mul", v, L.op("Pow", L.constant(2, dtype), e))


@lowers("heaviside")
def _heaviside(L, x, values):
    dtype, (v, at_zero) = _operands_of(L, x, values)
    zero = L.constant(0, dtype)
    return L.op("Where", L.op("Equal", v, zero), at_zero, L.op("Cast", L.op("Greater", v, zero), to=code(dtype)))


@lowers("sinc")
def _sinc(L, x):
    dtype, (v,) = _operands_of(L, x)
    zero, one = L.op("Equal", v, L.constant(0, dtype)), L.constant(1, dtype)
    angle = L.op("Mul", L.op("Where", zero, one, v), L.constant(np.pi, dtype))
    return L.op("Where", zero, one, L.op("Div", L.op("Sin", angle), angle))


def _infinity_test(positive):
    def rule(L, x):
        if not x.dtype.is_floating_point:
            return L.op("Not", L.op("Equal", L.value(x), L.value(x)))
        return L.op("IsInf", L.value(x), detect_negative=int(not positive), detect_positive=int(positive))
    return rule


attach_rule("isposinf", "onnx", _infinity_test(True))
attach_rule("isneginf", "onnx", _infinity_test(False))
attach_rule("isreal", "onnx", lambda L, x: L.op("Or", L.op("Equal", L.value(x), L.value(x)),
                                                L.op("Not", L.op("Equal", L.value(x), L.value(x)))))


@lowers("rsub")
def _rsub(L, x, other, alpha=1):
    _, (v, w) = _operands_of(L, x, other)
    return L.op("Sub", w, v if alpha == 1 else L.op("Mul", v, L.constant(alpha, _np(L.out))))


attach_rule("__rdiv__", "onnx", lambda L, x, other: L.op("Div", *_operands_of(L, other, x)[1]))


@lowers("ndtr")
def _ndtr(L, x):
    dtype, (v,) = _operands_of(L, x)
    half = L.constant(0.5, dtype)
    erf = L.op("Erf", L.op("Mul", v, L.constant(np.sqrt(0.5), dtype)))
    return L.op("Mul", half, L.op("Add", L.constant(1, dtype), erf))


@lowers("entr")
def _entr(L, x):
    dtype, (v,) = _operands_of(L, x)
    zero = L.constant(0, dtype)
    below = L.op("Where", L.op("Equal", v, zero), zero, L.constant(-np.inf, dtype))
    return L.op("Where", L.op("Greater", v, zero), L.op("Neg", L.op("Mul", v, L.op("Log", v))), below)


# ------------------------------------------------------------------------------------ shapes
@lowers("reshape", "view")
def _reshape(L, x, *shape):
    return L.op("Reshape", L.value(x), L.ints(_varargs(shape)))


@lowers("flatten")
def _flatten(L, x, start_dim=0, end_dim=-1):
    n = x.ndim
    if n == 0:
        return L.op("Reshape", L.value(x), L.ints([1]))
    start, end = _dim(start_dim, n), _dim(end_dim, n)
    sizes = _sizes(L, x)
    return L.op("Reshape", L.value(x), L.ints(sizes[:start] + [-1] + sizes[end + 1:]))


@lowers("unflatten")
def _unflatten(L, x, dim, sizes):
    d, full = _dim(dim, x.ndim), _sizes(L, x)
    return L.op("Reshape", L.value(x), L.ints(full[:d] + list(sizes) + full[d + 1:]))


@lowers("permute")
def _permute(L, x, *dims):
    return L.op("Transpose", L.value(x), perm=[_dim(d, x.ndim) for d in _varargs(dims)])


@lowers("transpose")
def _transpose(L, x, dim0, dim1):
    perm = list(range(x.ndim))
    a, b = _dim(dim0, x.ndim), _dim(dim1, x.ndim)
    perm[a], perm[b] = perm[b], perm[a]
    return L.op("Transpose", L.value(x), perm=perm)


@lowers("t")
def _t(L, x):
    return L.op("Transpose", L.value(x), perm=[1, 0]) if x.ndim == 2 else L.op("Identity", L.value(x))


@lowers("unsqueeze")
def _unsqueeze(L, x, dim):
    return L.op("Unsqueeze", L.value(x), L.ints([_dim(dim, x.ndim + 1)]))


@lowers("squeeze")
def _squeeze(L, x, dim=None):
    dims = range(x.ndim) if dim is None else dim if isinstance(dim, (tuple, list)) else [dim]
    axes = [_dim(d, x.ndim) for d in dims if x.shape[_dim(d, x.ndim)] == 1]
    if dim is None and axes and L.tracer.traced(x):
        warn("minidl.onnx.export: squeeze() of a traced tensor removes the dims that had size 1 while tracing, "
             "whatever their size later")
    return L.op("Squeeze", L.value(x), L.ints(axes)) if axes else L.op("Identity", L.value(x))


@lowers("expand")
def _expand(L, x, *size):
    size, have = _varargs(size), _sizes(L, x)
    lead = len(size) - x.ndim
    wanted = [have[i - lead] if (s == -1 and not isinstance(s, TracedInt)) else s for i, s in enumerate(size)]
    return L.op("Expand", L.value(x), L.ints(wanted))


@lowers("cat")
def _cat(L, tensors, dim=0):
    dtype = _np(L.out)
    return L.op("Concat", *[_operand(L, t, dtype) for t in tensors], axis=_dim(dim, L.out.ndim))


@lowers("stack")
def _stack(L, tensors, dim=0):
    d = _dim(dim, L.out.ndim)
    return L.op("Concat", *[L.op("Unsqueeze", L.value(t), L.ints([d])) for t in tensors], axis=d)


def _split_outputs(L, x, dim, outs):
    d = _dim(dim, x.ndim)
    sizes = [t.shape[d] for t in outs]
    if len(outs) == 1:
        return (L.op("Identity", L.value(x)),)
    return L.op("Split", L.value(x), L.ints(sizes), outputs=len(outs), axis=d)


@lowers("split")
def _split(L, x, split_size_or_sections, dim=0):
    if isinstance(split_size_or_sections, int) and L.tracer.traced(x):
        _fixed_parts("split(x, size)")
    return _split_outputs(L, x, dim, L.out)


@lowers("chunk")
def _chunk(L, x, chunks, dim=0):
    """ONNX's Split into num_outputs parts is chunk's rule (ceil-sized parts, the last smaller)
    while the traced size gave ``chunks`` parts; else the traced sizes, with a warning."""
    if len(L.out) == chunks > 1:
        return L.op("Split", L.value(x), outputs=chunks, axis=_dim(dim, x.ndim), num_outputs=chunks)
    if L.tracer.traced(x):
        _fixed_parts("chunk(x, n)")
    return _split_outputs(L, x, dim, L.out)


def _fixed_parts(what):
    warn(f"minidl.onnx.export: {what} on a traced tensor keeps the number and sizes of the parts it had while "
         f"tracing")


@lowers("unbind")
def _unbind(L, x, dim=0):
    d = _dim(dim, x.ndim)
    parts = _split_outputs(L, x, d, [x.narrow(d, 0, 1)] * x.shape[d])
    return tuple(L.op("Squeeze", p, L.ints([d])) for p in parts)


@lowers("getitem")
def _getitem(L, x, index):
    """Basic indexing: ints (Gather), slices (Slice, bounds may be traced sizes), None, Ellipsis,
    and one integer index tensor (Gather)."""
    items = list(index) if isinstance(index, tuple) else [index]
    items = [np.asarray(i, dtype=np.int64) if isinstance(i, list) else i for i in items]   # (a list: an index tensor)
    if sum(1 for i in items if hasattr(i, "shape")) > 1:
        raise NotImplementedError("minidl.onnx.export: indexing with several index tensors is not lowered")
    used = sum(1 for i in items if i is not None and i is not Ellipsis and not _is_bool_tensor(i))
    if Ellipsis in [i for i in items if not hasattr(i, "shape")]:
        at = next(k for k, i in enumerate(items) if i is Ellipsis)
        items[at:at + 1] = [slice(None)] * (x.ndim - used)
    value, dim = L.value(x), 0
    for item in items:
        if item is None:
            value, dim = L.op("Unsqueeze", value, L.ints([dim])), dim + 1
        elif isinstance(item, slice):
            step = 1 if item.step is None else item.step
            if (item.start, item.stop, item.step) != (None, None, None):
                start = (INT64_MAX if step < 0 else 0) if item.start is None else item.start
                stop = (INT64_MIN if step < 0 else INT64_MAX) if item.stop is None else item.stop
                value = L.op("Slice", value, L.ints([start]), L.ints([stop]), L.ints([dim]), L.ints([step]))
            dim += 1
        elif isinstance(item, int) and not isinstance(item, bool):
            value = L.op("Gather", value, L.scalar(item), axis=dim)
        elif hasattr(item, "shape") and not _is_bool_tensor(item):
            index_value = L.constant(item) if isinstance(item, np.ndarray) else _operand(L, item, np.dtype(np.int64))
            value = L.op("Gather", value, index_value, axis=dim)
            dim += item.ndim
        else:
            raise NotImplementedError(f"minidl.onnx.export: indexing with {type(item).__name__} "
                                      f"{getattr(item, 'dtype', '')} is not lowered")
    return value


def _is_bool_tensor(i):
    return hasattr(i, "dtype") and getattr(i.dtype, "name", "") == "bool"


@lowers("narrow")
def _narrow(L, x, dim, start, length):
    d = _dim(dim, x.ndim)
    if start < 0:   # (counted from the end, as torch's: from the dim's size, which may be traced)
        start = _sizes(L, x)[d] + start
    return L.op("Slice", L.value(x), L.ints([start]), L.ints([start + length]), L.ints([d]))


@lowers("_split_heads")
def _split_heads(L, x, parts, heads, batch_first):
    """(N, seq, parts*E) (or seq first) -> ``parts`` tensors (N, heads, seq, E/heads)."""
    shaped = L.op("Reshape", L.value(x), L.ints([0, 0, parts, heads, -1]))   # (0: keep that dim)
    order = [2, 0, 3, 1, 4] if batch_first else [2, 1, 3, 0, 4]
    moved = L.op("Transpose", shaped, perm=order)
    return tuple(L.op("Gather", moved, L.scalar(k), axis=0) for k in range(parts))


# ------------------------------------------------------------------------------------ makers
@lowers("arange")
def _arange(L, start, end=None, step=1, dtype=None, device=None, requires_grad=False):
    if end is None:
        start, end = 0, start
    np_dtype = _np(L.out)
    return L.op("Range", *[L.scalar(v, np_dtype) if isinstance(v, TracedInt) else L.constant(v, np_dtype)
                           for v in (start, end, step)])


def _filled(L, size, value):
    return L.op("ConstantOfShape", L.ints(_varargs(size)), value=np.array([value], dtype=_np(L.out)))


@lowers("zeros")
def _zeros(L, *size, dtype=None, device=None, requires_grad=False):
    return _filled(L, size, 0)


@lowers("ones")
def _ones(L, *size, dtype=None, device=None, requires_grad=False):
    return _filled(L, size, 1)


@lowers("full")
def _full(L, size, fill_value, dtype=None, device=None, requires_grad=False):
    return _filled(L, size, fill_value)


def _trilu(upper):
    return lambda L, x, diagonal=0: L.op("Trilu", L.value(x), L.scalar(diagonal), upper=upper)


attach_rule("triu", "onnx", _trilu(1))
attach_rule("tril", "onnx", _trilu(0))


@lowers("remainder")
def _remainder(L, a, b):
    dtype = _np(L.out)
    x, y = _operand(L, a, dtype), _operand(L, b, dtype)
    if np.issubdtype(dtype, np.integer):
        return L.op("Mod", x, y)   # (fmod=0: the divisor's sign, as torch's)
    return L.op("Sub", x, L.op("Mul", L.op("Floor", L.op("Div", x, y)), y))


@lowers("expm1")
def _expm1(L, x):
    return L.op("Sub", L.op("Exp", L.value(x)), L.constant(1, _np(x)))


@lowers("log1p")
def _log1p(L, x):
    return L.op("Log", L.op("Add", L.value(x), L.constant(1, _np(x))))


@lowers("trunc")
def _trunc_op(L, x):
    return _trunc(L, L.value(x))


@lowers("round")
def _round(L, x, decimals=0):
    if decimals:
        scale = L.constant(10.0 ** decimals, _np(x))
        return L.op("Div", L.op("Round", L.op("Mul", L.value(x), scale)), scale)
    return L.op("Round", L.value(x))   # (half to even, as torch's)


@lowers("isinf")
def _isinf(L, x):
    return L.op("IsInf", L.value(x))


@lowers("isfinite")
def _isfinite(L, x):
    value = L.value(x)
    return L.op("Not", L.op("Or", L.op("IsInf", value), L.op("IsNaN", value)))


@lowers("true_divide")
def _true_divide(L, a, b):
    return _div(L, a, b)


def _like(fill):
    def rule(L, x, *args, dtype=None, device=None, requires_grad=False):
        value = fill if fill is not None else args[0]
        return L.op("ConstantOfShape", L.op("Shape", L.value(x)), value=np.array([value], dtype=_np(L.out)))
    return rule


attach_rule("zeros_like", "onnx", _like(0))
attach_rule("ones_like", "onnx", _like(1))
attach_rule("full_like", "onnx", _like(None))


@lowers("broadcast_to")
def _broadcast_to(L, x, shape):
    return _expand(L, x, *shape)


@lowers("movedim")
def _movedim(L, x, source, destination):
    sources = [_dim(d, x.ndim) for d in (source if isinstance(source, (tuple, list)) else [source])]
    targets = [_dim(d, x.ndim) for d in (destination if isinstance(destination, (tuple, list)) else [destination])]
    rest = iter(d for d in range(x.ndim) if d not in sources)
    placed = dict(zip(targets, sources))
    return L.op("Transpose", L.value(x), perm=[placed[i] if i in placed else next(rest) for i in range(x.ndim)])


@lowers("repeat")
def _repeat(L, x, *sizes):
    sizes = _varargs(sizes)
    value = L.value(x)
    if len(sizes) > x.ndim:
        value = L.op("Reshape", value, L.ints([1] * (len(sizes) - x.ndim) + _sizes(L, x)))
    return L.op("Tile", value, L.ints(sizes))


@lowers("flip")
def _flip(L, x, dims):
    dims = [_dim(d, x.ndim) for d in (dims if isinstance(dims, (tuple, list)) else [dims])]
    n = len(dims)
    return L.op("Slice", L.value(x), L.ints([-1] * n), L.ints([INT64_MIN] * n), L.ints(dims), L.ints([-1] * n))


@lowers("lerp")
def _lerp(L, start, end, weight):
    dtype = _np(L.out)
    a = _operand(L, start, dtype)
    return L.op("Add", a, L.op("Mul", _operand(L, weight, dtype), L.op("Sub", _operand(L, end, dtype), a)))


def _addc(op_type):
    def rule(L, x, tensor1, tensor2, value=1):
        dtype = _np(L.out)
        term = L.op(op_type, _operand(L, tensor1, dtype), _operand(L, tensor2, dtype))
        if value != 1:
            term = L.op("Mul", term, L.constant(value, dtype))
        return L.op("Add", _operand(L, x, dtype), term)
    return rule


attach_rule("addcmul", "onnx", _addc("Mul"))
attach_rule("addcdiv", "onnx", _addc("Div"))


@lowers("pad")
def _pad(L, x, pad, mode="constant", value=None):
    """torch's pad lists (before, after) pairs from the last dim backwards; ONNX's, every dim's
    befores then every dim's afters. (The op itself refuses other modes, before this runs.)"""
    modes = {"constant": "constant", "reflect": "reflect", "replicate": "edge", "circular": "wrap"}
    pairs = [(0, 0)] * (x.ndim - len(pad) // 2) + [(pad[2 * i], pad[2 * i + 1]) for i in range(len(pad) // 2)][::-1]
    fill = None if mode != "constant" else L.constant(0 if value is None else value, _np(x))
    return L.op("Pad", L.value(x), L.ints([p[0] for p in pairs] + [p[1] for p in pairs]), fill, mode=modes[mode])


def _function_ops() -> dict:
    """Function class -> op name: the ops whose registry function is that Function's ``apply``
    (``x.relu()`` applies it directly), and the operators' own (``x + y`` applies ``Add``)."""
    found = {}
    for d in OPS.values():
        owner = getattr(inspect.unwrap(d.function), "__self__", None)
        if isinstance(owner, type):
            found.setdefault(owner, d.name)
    found.update({ew.Add: "add", ew.Sub: "sub", ew.Mul: "mul", ew.Div: "div", ew.FloorDivide: "floor_divide",
                  ew.Remainder: "remainder", conversion.ToDtype: "to_dtype", conversion.ToDevice: "to_device"})
    return found


FUNCTION_OPS = _function_ops()
composite("cov")
composite("margin_ranking_loss", "hinge_embedding_loss", "soft_margin_loss", "multilabel_soft_margin_loss",
          "triplet_margin_loss", "triplet_margin_with_distance_loss", "cosine_embedding_loss", "multi_margin_loss",
          "multilabel_margin_loss", "gaussian_nll_loss", "poisson_nll_loss")

from . import (nn_lowerings, reduction_lowerings, index_lowerings, shape_lowerings,  # noqa: E402,F401
               activation_lowerings, norm_distance_lowerings, product_lowerings, resample_lowerings, pool_lowerings,
               linalg_lowerings)
