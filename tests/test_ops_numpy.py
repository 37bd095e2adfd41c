"""Every tensor op against numpy, on arbitrary strided views (tests/strategies.py).

Oracles are numpy or closed forms computed in float64 (erf: math.erf), compared
with tolerances that fit the result dtype.
"""
import math
import operator
import warnings

import numpy as np
import pytest
import strategies as S
from hypothesis import given
from hypothesis import strategies as st

import minidl

RTOL = {np.dtype(np.float32): 2e-5, np.dtype(np.float64): 1e-10, np.dtype(np.float16): 2e-3}
ATOL = {np.dtype(np.float32): 2e-6, np.dtype(np.float64): 1e-12, np.dtype(np.float16): 2e-3}
MD = {np.dtype(np.float32): minidl.float32, np.dtype(np.float64): minidl.float64,
      np.dtype(np.int64): minidl.int64, np.dtype(np.int32): minidl.int32, np.dtype(np.bool_): minidl.bool}


def check(out, expected, dtype=None, rtol=None, atol=None):
    """``out`` (a minidl tensor) equals ``expected`` (numpy, any dtype), shape and dtype included."""
    expected = np.asarray(expected)
    dtype = np.dtype(dtype) if dtype is not None else expected.dtype
    assert isinstance(out, minidl.Tensor), type(out)
    assert tuple(out.shape) == expected.shape, (tuple(out.shape), expected.shape)
    assert out.dtype is MD[dtype], (out.dtype, dtype)
    got = out.numpy()
    if dtype.kind == "f":
        np.testing.assert_allclose(got.astype(np.float64), expected.astype(np.float64),
                                   rtol=rtol or RTOL[dtype], atol=atol if atol is not None else ATOL[dtype],
                                   equal_nan=True)
    else:
        np.testing.assert_array_equal(got, expected.astype(dtype))


def f64(a):
    return np.asarray(a, dtype=np.float64)


_CATEGORY = {"b": 0, "i": 1, "u": 1, "f": 2}


def promote_pair(x, y):
    """PyTorch's promote_types: a higher category (bool < integer < floating) wins outright,
    within one category the wider dtype wins (unlike numpy, int64 + float32 is float32)."""
    x, y = np.dtype(x), np.dtype(y)
    if _CATEGORY[x.kind] != _CATEGORY[y.kind]:
        return x if _CATEGORY[x.kind] > _CATEGORY[y.kind] else y
    return x if x.itemsize >= y.itemsize else y


def promoted(*arrays):
    """PyTorch's result dtype for tensor operands (as numpy arrays): 0-d tensors count only when
    their category is higher than that of the tensors with dims."""
    result = zero = None
    for a in arrays:
        if a.ndim:
            result = a.dtype if result is None else promote_pair(result, a.dtype)
        else:
            zero = a.dtype if zero is None else promote_pair(zero, a.dtype)
    if zero is not None and (result is None or _CATEGORY[zero.kind] > _CATEGORY[result.kind]):
        result = zero
    return np.dtype(result)


# ----------------------------------------------------------------------------- unary
_erf = np.vectorize(math.erf, otypes=[np.float64])

# name -> (numpy reference in float64, input domain, float-only (ints promote to float32))
UNARY = {
    "neg": (np.negative, "normal", False),
    "abs": (np.abs, "normal", False),
    "sign": (np.sign, "normal", False),
    "exp": (np.exp, "small", True),
    "log": (np.log, "positive", True),
    "log1p": (np.log1p, "unit", True),
    "expm1": (np.expm1, "small", True),
    "sqrt": (np.sqrt, "positive", True),
    "rsqrt": (lambda a: 1 / np.sqrt(a), "positive", True),
    "reciprocal": (lambda a: 1 / a, "nonzero", True),
    "sin": (np.sin, "normal", True),
    "cos": (np.cos, "normal", True),
    "tan": (np.tan, "unit", True),
    "tanh": (np.tanh, "normal", True),
    "sigmoid": (lambda a: 1 / (1 + np.exp(-a)), "normal", True),
    "relu": (lambda a: np.maximum(a, 0), "normal", False),
    "erf": (_erf, "normal", True),
    "floor": (np.floor, "normal", False),
    "ceil": (np.ceil, "normal", False),
    "round": (np.round, "normal", False),
    "trunc": (np.trunc, "normal", False),
    "square": (np.square, "normal", False),
}


@pytest.mark.parametrize("name", sorted(UNARY))
@given(data=st.data())
def test_unary_on_views(name, data):
    ref, domain, float_only = UNARY[name]
    dtype = data.draw(st.sampled_from(["float32", "float64", "int64"]), label="dtype")
    t, a = data.draw(S.views(dtype=dtype, domain=domain), label="view")
    out = getattr(t, name)()
    if dtype == "int64" and not float_only:
        check(out, ref(a).astype(np.int64) if name != "sign" else np.sign(a), "int64")
    else:
        result = np.float32 if dtype == "int64" else a.dtype
        with np.errstate(divide="ignore", invalid="ignore"):  # the oracle's own edge cases (log1p(-1))
            expected = ref(f64(a))
        check(out, expected, result)
    # the function form is the same op, and the input is untouched
    check(getattr(minidl, name)(t), out.numpy(), out.dtype.np, rtol=0, atol=0)
    np.testing.assert_array_equal(t.numpy(), a)


def test_unary_special_values():
    x = minidl.tensor([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997])
    assert x.round().tolist() == [0., 2., 2., -0., -2., -2., 0.]          # half to even
    z = minidl.tensor([0., -0., -1., math.inf, -math.inf, math.nan])
    np.testing.assert_array_equal(z.log().numpy(), [-np.inf, -np.inf, np.nan, np.inf, np.nan, np.nan])
    np.testing.assert_array_equal(z.sqrt().numpy()[[0, 2, 3]], [0., np.nan, np.inf])
    np.testing.assert_array_equal(z.reciprocal().numpy()[:2], [np.inf, -np.inf])
    np.testing.assert_array_equal(minidl.tensor([-1., -2.]).log1p().numpy(), [-np.inf, np.nan])
    np.testing.assert_array_equal(z.sign().numpy()[:5], [0., 0., -1., 1., -1.])
    assert z.sign()[5].item() == 0  # PyTorch's sign(nan) is 0 (numpy's is nan)
    np.testing.assert_allclose(minidl.tensor([-100., 100.], dtype=minidl.float64).sigmoid().numpy(),
                               [math.exp(-100) / (1 + math.exp(-100)), 1.], rtol=1e-12)
    assert minidl.tensor([-3., 0., 2.]).relu().tolist() == [0., 0., 2.]
    # integer precision is kept beyond 2**53
    big = minidl.tensor([2 ** 60 + 1, -(2 ** 60) - 3])
    for op in ("neg", "abs", "square", "floor", "relu"):
        ref = {"neg": lambda v: -v, "abs": abs, "square": lambda v: (v * v + 2 ** 63) % 2 ** 64 - 2 ** 63,
               "floor": lambda v: v, "relu": lambda v: max(v, 0)}[op]
        assert getattr(big, op)().tolist() == [ref(v) for v in (2 ** 60 + 1, -(2 ** 60) - 3)], op


def test_unary_float16_and_int32_keep_dtype():
    h = minidl.tensor([0.5, -1.25, 2.0], dtype=minidl.float16)
    e = h.exp()
    assert e.dtype is minidl.float16
    np.testing.assert_allclose(e.numpy().astype(np.float64), np.exp([0.5, -1.25, 2.0]), rtol=2e-3)
    i = minidl.tensor([-3, 4], dtype=minidl.int32)
    assert i.abs().dtype is minidl.int32 and i.abs().tolist() == [3, 4]
    assert i.exp().dtype is minidl.float32
    assert minidl.tensor([True, False]).sqrt().dtype is minidl.float32


# ----------------------------------------------------------------------------- binary
def _np_floordiv(a, b):
    return np.floor_divide(a, b)


# name -> (operator on minidl, numpy reference, lhs domain, rhs domain)
BINARY = {
    "add": (operator.add, np.add, "normal", "normal"),
    "sub": (operator.sub, np.subtract, "normal", "normal"),
    "mul": (operator.mul, np.multiply, "normal", "normal"),
    "truediv": (operator.truediv, np.true_divide, "normal", "nonzero"),
    "floordiv": (operator.floordiv, _np_floordiv, "normal", "nonzero"),
    "mod": (operator.mod, np.mod, "normal", "nonzero"),
    "pow": (operator.pow, np.power, "positive", "small"),
    "maximum": (minidl.maximum, np.maximum, "normal", "normal"),
    "minimum": (minidl.minimum, np.minimum, "normal", "normal"),
    "gate": (lambda a, b: minidl.ops.elementwise.Gate.apply(a, b), lambda a, b: np.where(b > 0, a, 0 * a),
             "normal", "normal"),   # ReLU's backward
}


def _binary_expected(name, ref, a, b, result):
    if np.dtype(result).kind == "f":
        if name in ("floordiv", "mod") and a.dtype == b.dtype:
            return ref(a, b)   # same-dtype rounding: floor of a quotient near an integer is sensitive
        return ref(f64(a), f64(b))
    if name == "pow":
        return np.power(a.astype(np.int64), np.abs(b).astype(np.int64))
    return ref(a.astype(np.int64), b.astype(np.int64))


@pytest.mark.parametrize("name", sorted(BINARY))
@given(data=st.data())
def test_binary_tensor_tensor_broadcast_views(name, data):
    op, ref, dom_a, dom_b = BINARY[name]
    dtype = data.draw(st.sampled_from(["float32", "float64", "int64"]), label="dtype")
    if name == "pow" and dtype == "int64":
        dom_b = "positive"
    (x, a), (y, b) = data.draw(S.broadcast_views([dtype, dtype], [dom_a, dom_b]), label="views")
    if name == "pow" and dtype == "int64":
        y, b = y.clamp(0, 3), np.clip(b, 0, 3)
    out = op(x, y)
    result = np.float32 if name == "truediv" and dtype == "int64" else np.dtype(dtype)
    check(out, _binary_expected(name, ref, a, b, result), result)


@pytest.mark.parametrize("name", sorted(set(BINARY) - {"maximum", "minimum", "gate"}))   # those take tensors only
@given(data=st.data())
def test_binary_with_python_scalars(name, data):
    op, ref, dom_a, _ = BINARY[name]
    dtype = data.draw(st.sampled_from(["float32", "float64", "int64"]), label="dtype")
    t, a = data.draw(S.views(dtype=dtype, domain=dom_a if name != "pow" else "positive"), label="view")
    is_float = data.draw(st.booleans(), label="float scalar")
    if name == "pow":
        s = data.draw(st.sampled_from([0.5, 2.0, -1.5, 3.0]) if is_float else st.sampled_from([0, 1, 2, 3]))
    elif name in ("truediv", "floordiv", "mod"):
        s = data.draw(st.sampled_from([2.5, -1.5, 0.75]) if is_float else st.sampled_from([3, -2, 7]))
    else:
        s = data.draw(st.sampled_from([2.5, -1.5, 0.0]) if is_float else st.sampled_from([3, -2, 0]))
    tensor_is_float = dtype != "int64"
    result = np.dtype(dtype) if (tensor_is_float or not is_float) else np.dtype(np.float32)
    if name == "truediv" and not tensor_is_float:
        result = np.dtype(np.float32)
    sa = np.asarray(s, dtype=np.float64 if is_float else np.int64)
    # tensor (op) scalar
    check(op(t, s), _binary_expected(name, ref, a, sa, result).astype(result), result)
    # scalar (op) tensor: the tensor must be a valid right operand
    if name in ("truediv", "floordiv", "mod"):
        t2, a2 = data.draw(S.views(dtype=dtype, domain="nonzero"), label="divisor view")
    elif name == "pow":
        t2, a2 = data.draw(S.views(dtype=dtype, domain="small" if tensor_is_float else "positive"), label="exp")
        if not tensor_is_float:
            t2, a2 = t2.clamp(0, 3), np.clip(a2, 0, 3)
        s = abs(s) if s != 0 else 2
        sa = np.asarray(s, dtype=np.float64 if is_float else np.int64)
    else:
        t2, a2 = t, a
    check(op(s, t2), _binary_expected(name, ref, np.broadcast_to(sa, a2.shape), a2, result).astype(result), result)


def test_division_special_cases():
    x = minidl.tensor([1., -1., 0., 2.5])
    np.testing.assert_array_equal((x / 0).numpy(), [np.inf, -np.inf, np.nan, np.inf])
    np.testing.assert_array_equal((x / -0.).numpy(), [-np.inf, np.inf, np.nan, -np.inf])
    np.testing.assert_array_equal((x // 0).numpy(), [np.inf, -np.inf, np.nan, np.inf])
    assert np.isnan((x % 0).numpy()).all()
    np.testing.assert_array_equal((minidl.tensor([1, 0, -2]) / 0).numpy(), [np.inf, np.nan, -np.inf])
    # Python-style floor division and remainder (sign of the divisor), as in PyTorch
    i = minidl.tensor([-7, 7, -7, 7])
    j = minidl.tensor([2, 2, -2, -2])
    assert (i // j).tolist() == [-4, 3, 3, -4]
    assert (i % j).tolist() == [1, 1, -1, -1]
    assert minidl.remainder(i, 3).tolist() == [2, 1, 2, 1]
    assert minidl.floor_divide(i, 3).tolist() == [-3, 2, -3, 2]
    f = minidl.tensor([-7.5, 7.5])
    assert (f % 2).tolist() == [0.5, 1.5] and (f % -2).tolist() == [-1.5, -0.5]
    assert (f // 2).tolist() == [-4., 3.]
    assert minidl.div(f, 2, rounding_mode="trunc").tolist() == [-3., 3.]
    assert minidl.div(f, 2, rounding_mode="floor").tolist() == [-4., 3.]
    assert minidl.div(i, 2, rounding_mode="trunc").tolist() == [-3, 3, -3, 3]
    assert minidl.div(i, 2, rounding_mode="trunc").dtype is minidl.int64
    # int64 arithmetic is exact beyond 2**53
    big = minidl.tensor([2 ** 60 + 1])
    assert (big + 0).item() == 2 ** 60 + 1 and (big * 1).item() == 2 ** 60 + 1
    assert (big // 1).item() == 2 ** 60 + 1 and (big - 1).item() == 2 ** 60
    assert minidl.maximum(big, big).item() == 2 ** 60 + 1


@pytest.mark.parametrize("name", ["eq", "ne", "lt", "le", "gt", "ge"])
@given(data=st.data())
def test_comparisons_on_views(name, data):
    ops = {"eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "le": operator.le, "gt": operator.gt,
           "ge": operator.ge}
    op = ops[name]
    dtype = data.draw(st.sampled_from(["float32", "int64", "bool", "float64"]), label="dtype")
    (x, a), (y, b) = data.draw(S.broadcast_views([dtype, dtype]), label="views")
    check(op(x, y), op(a, b), np.bool_)
    check(getattr(minidl, name)(x, y), op(a, b), np.bool_)
    check(getattr(x, name)(y), op(a, b), np.bool_)
    # with Python scalars on either side, and mixed dtypes
    s = 0 if dtype != "float32" else 0.5
    check(op(x, s), op(a, s), np.bool_)
    check(op(s, x), op(s, a), np.bool_)
    check(op(x, y.double()), op(a.astype(np.float64), b.astype(np.float64)), np.bool_)


@pytest.mark.parametrize("name", ["logical_and", "logical_or", "logical_xor"])
@given(data=st.data())
def test_logical_ops_on_views(name, data):
    ref = getattr(np, name)
    dtypes = data.draw(st.sampled_from([("bool", "bool"), ("bool", "int64"), ("float32", "bool")]))
    (x, a), (y, b) = data.draw(S.broadcast_views(list(dtypes)), label="views")
    check(getattr(minidl, name)(x, y), ref(a, b), np.bool_)
    check(getattr(x, name)(y), ref(a, b), np.bool_)
    if dtypes == ("bool", "bool"):
        sym = {"logical_and": operator.and_, "logical_or": operator.or_, "logical_xor": operator.xor}[name]
        check(sym(x, y), ref(a, b), np.bool_)
        check(~x, np.logical_not(a), np.bool_)
    check(minidl.logical_not(x), np.logical_not(a), np.bool_)
    check(x.logical_not(), np.logical_not(a), np.bool_)


@given(S.broadcast_views(["bool", ("float32", "int64", "float64"), ("float32", "int64", "float64")]))
def test_where_on_views(views):
    (c, ca), (x, a), (y, b) = views
    out = minidl.where(c, x, y)
    result = promoted(a, b)
    check(out, np.where(ca, a, b), result)
    check(minidl.where(c, x, 2), np.where(ca, a, np.asarray(2, a.dtype)), a.dtype)
    check(x.where(c, y), np.where(ca, a, b), result)


@given(data=st.data())
def test_clamp_on_views(data):
    dtype = data.draw(st.sampled_from(["float32", "float64", "int64"]))
    t, a = data.draw(S.views(dtype=dtype), label="view")
    lo, hi = data.draw(st.sampled_from([(-1, 1), (0, None), (None, 0), (2, -2)]))
    kw = {}
    if lo is not None:
        kw["min"] = lo
    if hi is not None:
        kw["max"] = hi
    exp = a
    if lo is not None:
        exp = np.maximum(exp, lo)
    if hi is not None:
        exp = np.minimum(exp, hi)
    check(t.clamp(**kw), exp.astype(a.dtype), a.dtype)
    check(minidl.clamp(t, **kw), exp.astype(a.dtype), a.dtype)
    check(t.clip(**kw), exp.astype(a.dtype), a.dtype)
    if dtype != "int64":
        check(t.clamp(min=-0.5, max=0.5), np.clip(a, -0.5, 0.5), a.dtype)
    # tensor bounds, broadcast
    (x, xa), (l, la), (h, ha) = data.draw(S.broadcast_views([dtype, dtype, dtype]), label="bounds")
    check(x.clamp(l, h), np.minimum(np.maximum(xa, la), ha), dtype)
    check(x.clamp(min=l), np.maximum(xa, la), dtype)
    check(x.clamp(max=h), np.minimum(xa, ha), dtype)
    with pytest.raises((RuntimeError, ValueError, TypeError)):
        t.clamp()


# ----------------------------------------------------------------------------- reductions
@st.composite
def dims_for(draw, ndim, allow_none=True, allow_tuple=True):
    choices = ["int"] + (["none"] if allow_none else []) + (["tuple"] if allow_tuple and ndim else [])
    kind = draw(st.sampled_from(choices))
    if kind == "none":
        return None
    if ndim == 0:
        return draw(st.sampled_from([0, -1]))
    if kind == "int":
        return draw(st.integers(-ndim, ndim - 1))
    picked = draw(st.lists(st.integers(0, ndim - 1), min_size=1, max_size=ndim, unique=True))
    return tuple(d - ndim if draw(st.booleans()) else d for d in picked)


def np_axis(dim, ndim):
    if dim is None:
        return None
    if ndim == 0:
        return None
    return dim if isinstance(dim, int) else tuple(dim)


def reduced_count(shape, dim):
    if dim is None or not shape:
        return math.prod(shape)
    dims = (dim,) if isinstance(dim, int) else dim
    return math.prod(shape[d] for d in dims)


def _call(fn, t, dim, keepdim, **kw):
    return fn(t, **kw, keepdim=keepdim) if dim is None else fn(t, dim, keepdim=keepdim, **kw)


SUM_LIKE = {
    "sum": (lambda a, axis, keepdims: np.sum(a, axis=axis, keepdims=keepdims), "normal"),
    "mean": (lambda a, axis, keepdims: np.mean(a, axis=axis, keepdims=keepdims), "normal"),
    "prod": (lambda a, axis, keepdims: np.prod(a, axis=axis, keepdims=keepdims), "small"),
    "var": (lambda a, axis, keepdims: np.var(a, axis=axis, keepdims=keepdims, ddof=1), "normal"),
    "std": (lambda a, axis, keepdims: np.std(a, axis=axis, keepdims=keepdims, ddof=1), "normal"),
}


@pytest.mark.parametrize("shape,dims", [((300, 5000), (0,)), ((300, 5000), (1,)), ((6, 50, 4000), (0, 1)),
                                        ((6, 50, 4000), (0, 2)), ((6, 4000, 50), (0, 2))])
def test_large_sums_over_leading_and_trailing_dims(shape, dims):
    """Large enough for several work items and the threaded kernels; each kernel path in turn."""
    a = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    np.testing.assert_allclose(minidl.from_numpy(a).sum(dims).numpy(), f64(a).sum(dims), rtol=2e-6, atol=1e-4)


@pytest.mark.parametrize("name", sorted(SUM_LIKE))
@given(data=st.data())
def test_sum_like_reductions(name, data):
    ref, domain = SUM_LIKE[name]
    dtypes = ["float32", "float64"] + (["int64", "bool"] if name in ("sum", "prod") else [])
    dtype = data.draw(st.sampled_from(dtypes), label="dtype")
    t, a = data.draw(S.views(dtype=dtype, domain=domain), label="view")
    dim = data.draw(dims_for(t.ndim), label="dim")
    keepdim = data.draw(st.booleans(), label="keepdim")
    fn = getattr(minidl, name)
    out = _call(fn, t, dim, keepdim)
    src = f64(a) if a.dtype.kind == "f" else a.astype(np.int64)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")      # numpy warns about empty / 1-element var
        exp = ref(src, np_axis(dim, a.ndim), keepdim)
        exp_all = ref(src, None, False)
    result = a.dtype if a.dtype.kind == "f" else np.dtype(np.int64)
    rtol = 1e-4 if (result == np.float32 and name in ("var", "std", "prod")) else None
    atol = 1e-5 if result == np.float32 else None
    check(out, exp, result, rtol=rtol, atol=atol)
    # the method spelling, over all dims
    check(getattr(t, name)(), exp_all, result, rtol=rtol, atol=atol)


def test_var_std_corrections_and_empty():
    a = np.array([[1., 2., 4.], [3., 5., 9.]])
    t = minidl.tensor(a, dtype=minidl.float64)
    check(t.var(), np.var(a, ddof=1))
    check(t.var(1, unbiased=False), np.var(a, 1))
    check(t.var(0, correction=0, keepdim=True), np.var(a, 0, keepdims=True))
    check(t.std(unbiased=True), np.std(a, ddof=1))
    check(minidl.std(t, 1, correction=2), np.sqrt(np.sum((a - a.mean(1, keepdims=True)) ** 2, 1) / 1))
    # too few elements: nan, as in PyTorch
    assert math.isnan(minidl.tensor([3.]).var().item())
    assert math.isnan(minidl.zeros(0).var().item())
    assert math.isnan(minidl.zeros(0).mean().item())
    assert minidl.zeros(0).sum().item() == 0 and minidl.zeros(0).prod().item() == 1
    check(minidl.zeros(2, 0).mean(1), np.full(2, np.nan, np.float32))
    with pytest.raises(RuntimeError):
        minidl.tensor([1, 2]).mean()          # integer mean needs a dtype
    check(minidl.tensor([1, 2]).mean(dtype=minidl.float64), np.float64(1.5))
    check(minidl.tensor([1, 2]).sum(dtype=minidl.float32), np.float32(3))


EXTREMES = {"amax": np.amax, "amin": np.amin}


@pytest.mark.parametrize("name", ["amax", "amin"])
@given(data=st.data())
def test_amax_amin(name, data):
    dtype = data.draw(st.sampled_from(["float32", "float64", "int64", "bool"]), label="dtype")
    t, a = data.draw(S.views(dtype=dtype), label="view")
    dim = data.draw(dims_for(t.ndim), label="dim")
    keepdim = data.draw(st.booleans(), label="keepdim")
    fn = getattr(minidl, name)
    axis = np_axis(dim, a.ndim)
    if reduced_count(a.shape, dim) == 0 and a.size == 0 and (dim is None or any(
            a.shape[d] == 0 for d in ((dim,) if isinstance(dim, int) else dim))):
        with pytest.raises((RuntimeError, IndexError)):
            _call(fn, t, dim, keepdim)
        return
    check(_call(fn, t, dim, keepdim), EXTREMES[name](a, axis=axis, keepdims=keepdim), a.dtype)


@pytest.mark.parametrize("name", ["max", "min"])
@given(data=st.data())
def test_max_min_with_dim_values_and_indices(name, data):
    dtype = data.draw(st.sampled_from(["float32", "float64", "int64"]), label="dtype")
    t, a = data.draw(S.views(dtype=dtype, min_dims=0), label="view")
    dim = data.draw(st.integers(-max(t.ndim, 1), max(t.ndim, 1) - 1), label="dim")
    keepdim = data.draw(st.booleans(), label="keepdim")
    np_fn, np_arg = (np.max, np.argmax) if name == "max" else (np.min, np.argmin)
    fn = getattr(minidl, name)
    if a.ndim and a.shape[dim] == 0:
        with pytest.raises((RuntimeError, IndexError)):
            fn(t, dim, keepdim)
        return
    res = fn(t, dim, keepdim=keepdim)
    values, indices = res
    assert res.values is values and res.indices is indices
    aa = a if a.ndim else a.reshape(1)
    d = dim if a.ndim else 0
    ev = np_fn(aa, axis=d, keepdims=keepdim)
    ei = np_arg(aa, axis=d, keepdims=keepdim)       # first occurrence of the extreme, as PyTorch
    if not a.ndim:
        ev, ei = ev.reshape(()), ei.reshape(())
    check(values, ev, a.dtype)
    check(indices, ei, np.int64)
    # elementwise spelling: max(a, b)
    check(fn(t, t * 0), (np.maximum if name == "max" else np.minimum)(a, a * 0), a.dtype)
    if a.size:
        check(fn(t), np_fn(a), a.dtype)


@pytest.mark.parametrize("name", ["argmax", "argmin"])
@given(data=st.data())
def test_argmax_argmin(name, data):
    dtype = data.draw(st.sampled_from(["float32", "int64", "float64"]), label="dtype")
    t, a = data.draw(S.views(dtype=dtype), label="view")
    np_fn = getattr(np, name)
    fn = getattr(minidl, name)
    if a.size:
        check(fn(t), np_fn(a.reshape(-1)), np.int64)
        keep = fn(t, keepdim=True)
        assert tuple(keep.shape) == (1,) * a.ndim
    else:
        with pytest.raises((RuntimeError, IndexError)):
            fn(t)
    if a.ndim:
        dim = data.draw(st.integers(-a.ndim, a.ndim - 1), label="dim")
        keepdim = data.draw(st.booleans(), label="keepdim")
        if a.shape[dim] == 0:
            with pytest.raises((RuntimeError, IndexError)):
                fn(t, dim, keepdim)
        else:
            check(fn(t, dim, keepdim), np_fn(a, axis=dim, keepdims=keepdim), np.int64)
            check(getattr(t, name)(dim=dim), np_fn(a, axis=dim), np.int64)


def _np_logsumexp(a, axis, keepdims):
    a = f64(a)
    with np.errstate(all="ignore"):
        m = np.max(a, axis=axis, keepdims=True) if a.size else np.zeros([1] * a.ndim)
        m = np.where(np.isfinite(m), m, 0)
        out = np.log(np.sum(np.exp(a - m), axis=axis, keepdims=True)) + m
    if not keepdims:
        out = np.squeeze(out, axis=axis) if axis is not None else out.reshape(())
    return out


@given(data=st.data())
def test_logsumexp(data):
    dtype = data.draw(st.sampled_from(["float32", "float64"]))
    t, a = data.draw(S.views(dtype=dtype, min_dims=1), label="view")
    dim = data.draw(dims_for(t.ndim, allow_none=False), label="dim")
    keepdim = data.draw(st.booleans())
    check(t.logsumexp(dim, keepdim=keepdim), _np_logsumexp(a, np_axis(dim, a.ndim), keepdim), dtype)
    check(minidl.logsumexp(t * 100, dim, keepdim), _np_logsumexp(a * 100, np_axis(dim, a.ndim), keepdim), dtype)


@pytest.mark.parametrize("name", ["cumsum", "cumprod"])
@given(data=st.data())
def test_cumsum_cumprod(name, data):
    dtype = data.draw(st.sampled_from(["float32", "float64", "int64", "bool"]))
    t, a = data.draw(S.views(dtype=dtype, domain="small" if name == "cumprod" else "normal"), label="view")
    dim = data.draw(st.integers(-max(a.ndim, 1), max(a.ndim, 1) - 1), label="dim")
    ref = getattr(np, name)
    result = a.dtype if a.dtype.kind == "f" else np.dtype(np.int64)
    src = f64(a) if a.dtype.kind == "f" else a.astype(np.int64)
    exp = ref(src, axis=dim) if a.ndim else src
    check(getattr(t, name)(dim), exp, result, rtol=1e-4 if result == np.float32 else None, atol=1e-5)
    check(getattr(minidl, name)(t, dim=dim), exp, result, rtol=1e-4 if result == np.float32 else None, atol=1e-5)
    if a.ndim and dtype != "bool":
        check(getattr(t, name)(dim, dtype=minidl.float64), ref(f64(a), axis=dim), np.float64)


def _np_norm(a, p, axis, keepdims):
    a = np.abs(f64(a))
    if p in ("fro", 2):
        return np.sqrt(np.sum(a * a, axis=axis, keepdims=keepdims))
    if p == math.inf:
        return np.max(a, axis=axis, keepdims=keepdims)
    if p == -math.inf:
        return np.min(a, axis=axis, keepdims=keepdims)
    if p == 0:
        return np.sum(a != 0, axis=axis, keepdims=keepdims).astype(np.float64)
    return np.sum(a ** p, axis=axis, keepdims=keepdims) ** (1 / p)


@given(data=st.data())
def test_norm(data):
    dtype = data.draw(st.sampled_from(["float32", "float64"]))
    p = data.draw(st.sampled_from(["fro", 2, 1, 3, 0.5, 0, math.inf, -math.inf]))
    t, a = data.draw(S.views(dtype=dtype), label="view")
    dim = data.draw(dims_for(t.ndim), label="dim")
    keepdim = data.draw(st.booleans())
    axis = np_axis(dim, a.ndim)
    if p in (math.inf, -math.inf) and (a.size == 0 and (dim is None or reduced_count(a.shape, dim) == 0)):
        with pytest.raises((RuntimeError, IndexError)):
            t.norm(p, dim, keepdim)
        return
    with np.errstate(all="ignore"):
        exp = _np_norm(a, p, axis, keepdim)
    check(t.norm(p, dim, keepdim), exp, dtype, rtol=1e-4 if dtype == "float32" else None, atol=1e-5)
    if p == 2:
        check(minidl.norm(t), _np_norm(a, 2, None, False), dtype, rtol=1e-4 if dtype == "float32" else None)


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
@given(data=st.data())
def test_softmax_log_softmax(name, data):
    dtype = data.draw(st.sampled_from(["float32", "float64", "int64"]))
    t, a = data.draw(S.views(dtype=dtype), label="view")
    dim = data.draw(st.integers(-max(a.ndim, 1), max(a.ndim, 1) - 1), label="dim")
    x = f64(a)
    axis = dim if a.ndim else None
    with np.errstate(all="ignore"):
        m = np.max(x, axis=axis, keepdims=True) if x.size else 0
        e = np.exp(x - m)
        sm = e / np.sum(e, axis=axis, keepdims=True)
        lsm = (x - m) - np.log(np.sum(e, axis=axis, keepdims=True))
    result = a.dtype if a.dtype.kind == "f" else np.dtype(np.float32)
    exp = sm if name == "softmax" else lsm
    check(getattr(t, name)(dim), exp, result)
    check(getattr(minidl, name)(t * 30, dim=dim), _softmax_ref(name, x * 30, axis), result,
          rtol=1e-4 if result == np.float32 else None, atol=1e-5)
    check(getattr(t, name)(dim, dtype=minidl.float64), exp, np.float64)


def _softmax_ref(name, x, axis):
    with np.errstate(all="ignore"):
        m = np.max(x, axis=axis, keepdims=True) if x.size else 0
        e = np.exp(x - m)
        if name == "softmax":
            return e / np.sum(e, axis=axis, keepdims=True)
        return (x - m) - np.log(np.sum(e, axis=axis, keepdims=True))


@pytest.mark.parametrize("name", ["any", "all"])
@given(data=st.data())
def test_any_all(name, data):
    dtype = data.draw(st.sampled_from(["bool", "float32", "int64"]))
    t, a = data.draw(S.views(dtype=dtype), label="view")
    if dtype != "bool":
        t, a = t * (t > 0.5), a * (a > 0.5)    # plenty of zeros
    dim = data.draw(dims_for(t.ndim), label="dim")
    keepdim = data.draw(st.booleans())
    ref = getattr(np, name)
    check(_call(getattr(minidl, name), t, dim, keepdim), ref(a, axis=np_axis(dim, a.ndim), keepdims=keepdim),
          np.bool_)
    check(getattr(t, name)(), ref(a), np.bool_)


def test_count_nonzero():
    a = np.array([[0, 1, 2], [0, 0, 3]])
    check(minidl.tensor(a).count_nonzero(), np.int64(3))
    check(minidl.tensor(a).count_nonzero(1), np.count_nonzero(a, 1).astype(np.int64))


# ----------------------------------------------------------------------------- matmul family
@st.composite
def matmul_operands(draw, dtype):
    kind = draw(st.sampled_from(["mm", "batched", "vec_mat", "mat_vec", "vec_vec", "batched_vec"]))
    m, k, n = draw(st.integers(0, 4)), draw(st.integers(0, 5)), draw(st.integers(0, 4))
    if kind == "batched":
        ba, bb = draw(S.broadcast_shape_tuples(2, 0, 2, 3))
        sa, sb = ba + (m, k), bb + (k, n)
    elif kind == "mm":
        sa, sb = (m, k), (k, n)
    elif kind == "vec_mat":
        bb = draw(S.shapes(0, 2, 1, 3))
        sa, sb = (k,), bb + (k, n)
    elif kind == "mat_vec":
        ba = draw(S.shapes(0, 2, 1, 3))
        sa, sb = ba + (m, k), (k,)
    elif kind == "batched_vec":
        sa, sb = (2, m, k), (k,)
    else:
        sa, sb = (k,), (k,)
    x = draw(S.view_of_shape(sa, dtype))
    y = draw(S.view_of_shape(sb, dtype))
    return x, y


@given(data=st.data())
def test_matmul_on_views(data):
    dtype = data.draw(st.sampled_from(["float32", "float64", "int64"]))
    (x, a), (y, b) = data.draw(matmul_operands(dtype))
    exp = np.matmul(f64(a), f64(b)) if dtype != "int64" else np.matmul(a, b)
    rtol = 1e-5 if dtype == "float32" else None
    check(x @ y, exp, dtype, rtol=rtol, atol=1e-5)
    check(minidl.matmul(x, y), exp, dtype, rtol=rtol, atol=1e-5)
    check(x.matmul(y), exp, dtype, rtol=rtol, atol=1e-5)


@given(data=st.data())
def test_bmm_mm_dot_outer(data):
    dtype = data.draw(st.sampled_from(["float32", "float64"]))
    bsz, m, k, n = (data.draw(st.integers(0, 4)) for _ in range(4))
    x, a = data.draw(S.view_of_shape((bsz, m, k), dtype))
    y, b = data.draw(S.view_of_shape((bsz, k, n), dtype))
    check(minidl.bmm(x, y), np.matmul(f64(a), f64(b)), dtype, atol=1e-5)
    check(x.bmm(y), np.matmul(f64(a), f64(b)), dtype, atol=1e-5)
    p, pa = data.draw(S.view_of_shape((m, k), dtype))
    q, qa = data.draw(S.view_of_shape((k, n), dtype))
    check(minidl.mm(p, q), f64(pa) @ f64(qa), dtype, atol=1e-5)
    u, ua = data.draw(S.view_of_shape((k,), dtype))
    v, va = data.draw(S.view_of_shape((k,), dtype))
    check(minidl.dot(u, v), np.dot(f64(ua), f64(va)), dtype, atol=1e-5)
    check(minidl.outer(u, v), np.outer(f64(ua), f64(va)), dtype, atol=1e-5)
    with pytest.raises(RuntimeError):
        minidl.bmm(p, q)
    with pytest.raises(RuntimeError):
        minidl.mm(x, y)


def test_matmul_errors():
    with pytest.raises(RuntimeError):
        minidl.ones(2, 3) @ minidl.ones(2, 3)
    with pytest.raises(RuntimeError):
        minidl.ones(3) @ minidl.ones(4)
    with pytest.raises(RuntimeError):
        minidl.tensor(2.) @ minidl.ones(2)
    with pytest.raises(RuntimeError):
        minidl.ones(2, 2, 3) @ minidl.ones(3, 3, 1)       # batch dims 2 vs 3
    assert (minidl.ones(3) @ minidl.ones(3)).shape == ()


EINSUM = [
    ("ij,jk->ik", [(3, 4), (4, 2)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ii->i", [(4, 4)]),
    ("ii", [(3, 3)]),
    ("ij->ji", [(2, 3)]),
    ("i,i->", [(5,), (5,)]),
    ("i,j->ij", [(3,), (4,)]),
    ("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 2)]),
    ("...ij,...jk", [(5, 2, 3, 4), (4, 2)]),
    ("bi,bi->b", [(3, 4), (3, 4)]),
    ("ij->", [(3, 4)]),
    ("ij->j", [(3, 4)]),
    ("...i->...", [(2, 3, 4)]),
    ("ijk->kji", [(2, 3, 4)]),
    ("iij->ij", [(3, 3, 2)]),
    ("ij,ij->ij", [(3, 4), (3, 4)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
    ("i...,i...->...", [(3, 2, 2), (3, 2, 2)]),
    ("bhqd,bhkd->bhqk", [(2, 2, 3, 4), (2, 2, 5, 4)]),
    ("ij , jk -> ik", [(2, 2), (2, 2)]),
]


@pytest.mark.parametrize("equation,shapes", EINSUM, ids=[e for e, _ in EINSUM])
@given(data=st.data())
def test_einsum_on_views(equation, shapes, data):
    dtype = data.draw(st.sampled_from(["float32", "float64"]))
    ops = [data.draw(S.view_of_shape(s, dtype), label=f"operand {i}") for i, s in enumerate(shapes)]
    exp = np.einsum(equation.replace(" ", ""), *[f64(a) for _, a in ops])
    check(minidl.einsum(equation, *[t for t, _ in ops]), exp, dtype, rtol=1e-5 if dtype == "float32" else None,
          atol=1e-5)
    check(minidl.einsum(equation, [t for t, _ in ops]), exp, dtype, rtol=1e-5 if dtype == "float32" else None,
          atol=1e-5)


# ----------------------------------------------------------------------------- shape ops
@given(data=st.data())
def test_cat_stack_on_views(data):
    dtype = data.draw(st.sampled_from(["float32", "int64", "bool", "float64"]))
    shape = data.draw(S.shapes(1, 3, 0, 3))
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    count = data.draw(st.integers(1, 3))
    parts = []
    for _ in range(count):
        s = list(shape)
        s[dim] = data.draw(st.integers(0, 3))
        parts.append(data.draw(S.view_of_shape(tuple(s), dtype)))
    check(minidl.cat([t for t, _ in parts], dim), np.concatenate([a for _, a in parts], dim), dtype)
    check(minidl.cat(tuple(t for t, _ in parts), dim=dim), np.concatenate([a for _, a in parts], dim), dtype)
    same = [data.draw(S.view_of_shape(shape, dtype)) for _ in range(count)]
    sdim = data.draw(st.integers(-len(shape) - 1, len(shape)))
    check(minidl.stack([t for t, _ in same], sdim), np.stack([a for _, a in same], sdim), dtype)


def test_cat_type_promotion_and_errors():
    out = minidl.cat([minidl.tensor([1, 2]), minidl.tensor([0.5])])
    check(out, np.array([1., 2., 0.5], np.float32))
    check(minidl.cat([minidl.zeros(0), minidl.ones(2, 2)]), np.ones((2, 2), np.float32))   # legacy empty
    with pytest.raises(RuntimeError):
        minidl.cat([minidl.ones(2, 3), minidl.ones(2, 4)])
    with pytest.raises(RuntimeError):
        minidl.cat([])
    with pytest.raises(RuntimeError):
        minidl.stack([minidl.ones(2), minidl.ones(3)])


@given(data=st.data())
def test_split_chunk_unbind(data):
    t, a = data.draw(S.views(dtype="float32", min_dims=1), label="view")
    dim = data.draw(st.integers(-a.ndim, a.ndim - 1))
    n = a.shape[dim]
    size = data.draw(st.integers(1, 4))
    parts = t.split(size, dim)
    exp = [a[(slice(None),) * (dim % a.ndim) + (slice(s, s + size),)] for s in range(0, n, size)] or [a]
    assert len(parts) == len(exp)
    for p, e in zip(parts, exp):
        check(p, e, np.float32)
        assert p.untyped_storage_id() == t.untyped_storage_id()
    # sections
    cuts = sorted(data.draw(st.lists(st.integers(0, n), max_size=3)))
    sections = [b - a_ for a_, b in zip([0] + cuts, cuts + [n])]
    parts = minidl.split(t, sections, dim)
    exp = np.split(a, cuts, axis=dim)
    assert len(parts) == len(exp)
    for p, e in zip(parts, exp):
        check(p, e, np.float32)
    with pytest.raises(RuntimeError):
        t.split([n + 1], dim)
    # chunk: chunks of ceil(n / k) elements, possibly fewer chunks (PyTorch rule)
    k = data.draw(st.integers(1, 5))
    chunks = t.chunk(k, dim)
    step = -(-n // k) if n else 1
    exp = [a[(slice(None),) * (dim % a.ndim) + (slice(s, s + step),)] for s in range(0, n, step)] or [a]
    assert len(chunks) == len(exp)
    for c, e in zip(chunks, exp):
        check(c, e, np.float32)
    for i, u in enumerate(t.unbind(dim)):
        check(u, np.take(a, i, axis=dim), np.float32)


@given(data=st.data())
def test_repeat(data):
    t, a = data.draw(S.views(dtype=("float32", "int64"), max_dims=3, max_numel=100), label="view")
    extra = data.draw(st.integers(0, 2))
    reps = tuple(data.draw(st.integers(0, 3)) for _ in range(a.ndim + extra))
    out = t.repeat(*reps) if reps else t.repeat(())
    check(out, np.tile(a, reps) if reps else a, a.dtype)
    if reps:
        check(t.repeat(reps), np.tile(a, reps), a.dtype)
    if a.ndim:
        with pytest.raises(RuntimeError):
            t.repeat(*([2] * (a.ndim - 1))) if a.ndim > 1 else t.repeat(())


@pytest.mark.parametrize("name", ["tril", "triu"])
@given(data=st.data())
def test_tril_triu(name, data):
    t, a = data.draw(S.views(dtype=("float32", "int64", "bool"), min_dims=2, out_min_dims=2), label="view")
    k = data.draw(st.integers(-4, 4))
    check(getattr(t, name)(k), getattr(np, name)(a, k), a.dtype)
    check(getattr(minidl, name)(t, diagonal=k), getattr(np, name)(a, k), a.dtype)
    check(getattr(t, name)(), getattr(np, name)(a), a.dtype)


@given(data=st.data())
def test_flip_roll(data):
    t, a = data.draw(S.views(dtype=("float32", "int64", "bool")), label="view")
    if a.ndim:
        dims = tuple(data.draw(st.lists(st.integers(0, a.ndim - 1), unique=True, max_size=a.ndim)))
        dims_arg = tuple(d - a.ndim if data.draw(st.booleans()) else d for d in dims)
        out = t.flip(dims_arg)
        check(out, np.flip(a, dims) if dims else a, a.dtype)
        assert out.untyped_storage_id() != t.untyped_storage_id()     # flip copies, as in PyTorch
        d = data.draw(st.integers(-a.ndim, a.ndim - 1))
        check(minidl.flip(t, d), np.flip(a, d), a.dtype)
        shifts = tuple(data.draw(st.integers(-7, 7)) for _ in dims)
        if dims:
            check(t.roll(shifts, dims_arg), np.roll(a, shifts, dims), a.dtype)
        s = data.draw(st.integers(-7, 7))
        check(t.roll(s, d), np.roll(a, s, d), a.dtype)
    s = data.draw(st.integers(-7, 7))
    check(minidl.roll(t, s), np.roll(a, s), a.dtype)


@given(data=st.data())
def test_pad_constant(data):
    t, a = data.draw(S.views(dtype=("float32", "int64"), min_dims=1, max_numel=100), label="view")
    npairs = data.draw(st.integers(1, a.ndim))
    pads = []
    for i in range(npairs):
        n = a.shape[a.ndim - 1 - i]
        lo = data.draw(st.integers(-n, 3))
        hi = data.draw(st.integers(-(n + min(lo, 0)), 3))
        pads += [lo, hi]
    value = data.draw(st.sampled_from([0, 1, -2]))
    # numpy oracle: crop negative pads, then np.pad positive ones
    exp = a
    width = [(0, 0)] * a.ndim
    for i in range(npairs):
        d = a.ndim - 1 - i
        lo, hi = pads[2 * i], pads[2 * i + 1]
        idx = [slice(None)] * a.ndim
        idx[d] = slice(max(-lo, 0), exp.shape[d] - max(-hi, 0))
        exp = exp[tuple(idx)]
        width[d] = (max(lo, 0), max(hi, 0))
    exp = np.pad(exp, width, constant_values=value)
    check(minidl.pad(t, pads, value=value), exp, a.dtype)
    if value == 0:
        check(minidl.pad(t, tuple(pads)), exp, a.dtype)


# ----------------------------------------------------------------------------- big strided operands
def test_large_strided_views_take_the_parallel_kernels(monkeypatch, request):
    """Above minidl.kernels.cpu.strided.PARALLEL_MIN elements the kernels run in parallel: the same
    answers on transposed, reversed and broadcast operands (the threshold lowered to keep it small)."""
    from minidl.kernels.cpu import strided
    monkeypatch.setattr(strided, "PARALLEL_MIN", 1 << 14)
    request.addfinalizer(lambda old=minidl.get_num_threads(): minidl.set_num_threads(old))
    minidl.set_num_threads(2)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((640, 500)).astype(np.float32)
    b = rng.standard_normal((500,)).astype(np.float32)
    x, y = minidl.tensor(a), minidl.tensor(b)
    xt, at = x.t()[::-1, ::-1], a.T[::-1, ::-1]                 # (500, 640), negative strides
    check(xt.exp(), np.exp(f64(at)), np.float32)
    check(xt * y[:, None] - 1.5, f64(at) * f64(b)[:, None] - 1.5, np.float32)
    check(xt > y[:, None], at > b[:, None], np.bool_)
    check(minidl.where(xt > 0, xt, y[:, None]), np.where(at > 0, at, b[:, None]), np.float32)
    check(xt.contiguous(), at, np.float32)
    check(xt.sum(1), f64(at).sum(1), np.float32, rtol=1e-4, atol=1e-4)
    check(xt.sum(0), f64(at).sum(0), np.float32, rtol=1e-4, atol=1e-4)
    check(xt.amax(1), at.max(1), np.float32)
    check(xt.argmax(0), at.argmax(0), np.int64)
    check(xt.cumsum(1), np.cumsum(f64(at), 1), np.float32, rtol=1e-3, atol=1e-3)
    idx = rng.integers(0, 500, 300_000)
    check(xt[idx, 3], at[idx, 3], np.float32)
    z = minidl.zeros(500, 640)
    z[minidl.tensor(idx), 5] = 1.
    exp = np.zeros((500, 640), np.float32)
    exp[idx, 5] = 1.
    check(z, exp, np.float32)
    i = minidl.arange(2 ** 19) * 3
    check(i // 7 + (i % 5), np.arange(2 ** 19) * 3 // 7 + (np.arange(2 ** 19) * 3) % 5, np.int64)


@pytest.mark.parametrize("ndim", [1, 2, 3, 4, 5])
def test_serial_row_loops_on_layouts_that_do_not_collapse(ndim):
    """Serial kernels walk up to three dims with local strides and fall back to per-row positions
    above that: permuted, reversed and broadcast operands of every rank against numpy."""
    rng = np.random.default_rng(ndim)
    shape = (3, 4, 5, 2, 3)[:ndim]
    a = rng.standard_normal(shape[::-1]).astype(np.float32)
    b = rng.standard_normal(shape[:-1] + (1,)).astype(np.float32)     # one value per row: a bias
    x = minidl.tensor(a).permute(*range(ndim - 1, -1, -1))              # no two dims merge
    an = a.transpose(*range(ndim - 1, -1, -1))
    if ndim > 1:
        x, an = x.flip(0), an[::-1]
    y = minidl.tensor(b)
    check(x + y, f64(an) + f64(b), np.float32)
    check(x * 2.0 - x.flip(-1), f64(an) * 2.0 - f64(an[..., ::-1]), np.float32)
    check(x.exp(), np.exp(f64(an)), np.float32)
    check(x.contiguous(), an, np.float32)
    check(x > y, an > b, np.bool_)
